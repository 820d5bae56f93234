"""The API (docs/api.md): OpenAI-compatible chat completions and models, the native ask and feedback endpoints,
and the OpenAPI document, served beside the Streamlit app by ``rag ui`` (ui/server.py) and alone by ``rag serve``.

    app.py       the endpoints and the request's steps; create_app() for rag serve
    identity.py  who is asking: an API key, a service key's asker, the deployment's sign-in
    replies.py   an answer as a chat tool shows it, and a conversation as the query path reads it
    schemas.py   the requests and responses (the OpenAPI document is generated from them: openapi.py)
    limits.py    rate limits per key and the body limit
    errors.py    every error in OpenAI's shape
    serve.py     the `rag serve` command
"""
