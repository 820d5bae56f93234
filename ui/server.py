"""What ``rag ui`` serves: the Streamlit app (ui/app.py) and, beside it, the route that opens a cited PDF in the
browser's own viewer with access checked on that request (ui/serving.py), the API under /v1 (ui/api, docs/api.md),
and the middleware that turns a failed OIDC sign-in into the sign-in page with a message saying why (ui/oidc.py).

``streamlit run ui/server.py`` finds the ``st.App`` below and serves it with uvicorn; ``streamlit run ui/app.py``
still serves the app alone, without "Open the PDF" links.
"""

from __future__ import annotations

import sys
from pathlib import Path

import streamlit as st
from starlette.middleware import Middleware

try:
    import ui.serving  # noqa: F401  (an installed checkout)
except ImportError:  # a source tree that is not installed
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from ui import oidc, serving
from ui.api.app import routes as api_routes

app = st.App("app.py", routes=serving.routes() + api_routes(), middleware=[Middleware(oidc.SignInErrors)])
