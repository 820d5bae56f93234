"""The LLM adapter: any OpenAI-compatible chat server (OpenAI, vLLM, Ollama, llama.cpp's server).

It is the one module that talks to ``openai``. Every failure leaves it as a ``GenerationError`` whose message
says what went wrong and whose hint says what to do; the ``openai`` exception stays on ``__cause__``.
Transient failures (429, 408/409, 5xx, connection errors, timeouts) are retried by ``openai`` itself,
``max_retries`` times with exponential backoff (honouring ``Retry-After``); the error we raise afterwards says
how many attempts were made.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import httpx2
import openai

from rag.errors import GenerationError
from rag.types import Generated, Prompt

if TYPE_CHECKING:
    from rag.config import Settings

NOT_REACHABLE_HINT = (
    "Start the packaged local model with `rag llm serve`, fix RAG_LLM_BASE_URL, "
    "or unset RAG_LLM_BASE_URL to use the offline extractive generator."
)


def messages_for(prompt: Prompt) -> list[dict[str, str]]:
    """Chat messages for a prompt: the system message (when there is one), then the user message."""
    messages = [{"role": "system", "content": prompt.system}] if prompt.system.strip() else []
    messages.append({"role": "user", "content": prompt.user})
    return messages


class LLMClient:
    """A chat-completions client with bounded time, bounded retries and errors a user can act on."""

    def __init__(
        self,
        base_url: str,
        model: str,
        *,
        api_key: str = "local",
        timeout_s: float = 120.0,
        max_retries: int = 2,
        max_tokens: int = 400,
    ) -> None:
        if not base_url:
            raise GenerationError(
                "No LLM server URL given.", hint="Set RAG_LLM_BASE_URL, e.g. http://127.0.0.1:8765/v1"
            )
        self.base_url = base_url.rstrip("/")
        self.model = model
        self.timeout_s = timeout_s
        self.max_retries = max_retries
        self.max_tokens = max_tokens
        # None until a streaming call finds out whether the server accepts stream_options.
        self.stream_usage_supported: bool | None = None
        self._client = openai.OpenAI(
            base_url=self.base_url, api_key=api_key or "local", timeout=timeout_s, max_retries=max_retries
        )

    @classmethod
    def from_settings(cls, settings: Settings) -> LLMClient | None:
        """The configured client, or None when no ``llm_base_url`` is set (the offline extractive path)."""
        if not settings.llm_base_url:
            return None
        return cls(
            settings.llm_base_url,
            settings.llm_model,
            api_key=settings.llm_api_key,
            timeout_s=settings.llm_timeout_s,
            max_retries=settings.llm_max_retries,
            max_tokens=settings.llm_max_tokens,
        )

    def __repr__(self) -> str:
        return f"LLMClient({self.base_url!r}, model={self.model!r})"

    # ------------------------------------------------------------------ calls
    def complete(
        self, prompt: Prompt, *, max_tokens: int | None = None, temperature: float = 0.0
    ) -> Generated:
        """One non-streaming completion. Raises GenerationError on any failure or on an empty answer."""
        try:
            response = self._client.chat.completions.create(
                model=self.model,
                messages=messages_for(prompt),  # type: ignore[arg-type]
                max_tokens=max_tokens or self.max_tokens,
                temperature=temperature,
            )
        except Exception as exc:
            raise self.translate(exc) from exc
        if not response.choices:
            raise GenerationError(
                f"The LLM server at {self.base_url} returned no choices.", hint="Check the server's log."
            )
        text = response.choices[0].message.content or ""
        if not text.strip():
            raise GenerationError(
                f"The LLM ({self.model}) returned an empty answer.",
                hint="Check the server's log; raise RAG_LLM_MAX_TOKENS if the model spends its tokens elsewhere.",
            )
        usage = response.usage
        return Generated(
            text=text.strip(),
            model=response.model or self.model,
            prompt_tokens=usage.prompt_tokens if usage else prompt.n_tokens,
            completion_tokens=usage.completion_tokens if usage else 0,
        )

    def stream(
        self, prompt: Prompt, *, max_tokens: int | None = None, temperature: float = 0.0
    ) -> StreamResult:
        """Start a streaming completion. The request is sent now, so an unreachable server raises here;
        iterate the result for text deltas, then read ``.generated`` for the whole text and token usage."""
        kwargs: dict[str, Any] = {
            "model": self.model,
            "messages": messages_for(prompt),
            "max_tokens": max_tokens or self.max_tokens,
            "temperature": temperature,
            "stream": True,
        }
        if self.stream_usage_supported is not False:
            try:
                chunks = self._client.chat.completions.create(
                    **kwargs, stream_options={"include_usage": True}
                )
                return StreamResult(self, prompt, chunks)
            except (openai.BadRequestError, openai.UnprocessableEntityError) as exc:
                if "stream_options" not in str(exc):
                    raise self.translate(exc) from exc
                self.stream_usage_supported = False  # an older server: count the deltas instead
            except Exception as exc:
                raise self.translate(exc) from exc
        try:
            chunks = self._client.chat.completions.create(**kwargs)
        except Exception as exc:
            raise self.translate(exc) from exc
        return StreamResult(self, prompt, chunks)

    def list_models(self, *, timeout_s: float | None = None) -> list[str]:
        """The model ids the server offers (also a cheap health check)."""
        try:
            client = self._client.with_options(timeout=timeout_s or self.timeout_s, max_retries=0)
            return [m.id for m in client.models.list()]
        except Exception as exc:
            raise self.translate(exc) from exc

    # ------------------------------------------------------------------ errors
    def translate(self, exc: BaseException) -> GenerationError:
        """Turn an ``openai`` (or transport) exception into a GenerationError with a hint."""
        url = self.base_url
        attempts = f"{self.max_retries + 1} attempt{'s' if self.max_retries else ''}"
        if isinstance(exc, GenerationError):
            return exc
        if isinstance(exc, openai.APITimeoutError | httpx2.TimeoutException):
            return GenerationError(
                f"The LLM server at {url} did not answer within {self.timeout_s:g} s ({attempts}).",
                hint="Raise RAG_LLM_TIMEOUT_S, or lower RAG_LLM_MAX_TOKENS / RAG_EVIDENCE_TOKEN_BUDGET; "
                "a 1.5B model on 2 CPU cores needs about 25-30 s for an answer over 1,500 tokens of evidence.",
            )
        if isinstance(exc, openai.APIConnectionError | httpx2.TransportError):
            return GenerationError(
                f"The LLM server at {url} is not reachable ({attempts}; {_cause_text(exc)}).",
                hint=NOT_REACHABLE_HINT,
            )
        if isinstance(exc, openai.AuthenticationError | openai.PermissionDeniedError):
            return GenerationError(
                f"The LLM server at {url} rejected the API key ({exc.status_code}): {_server_message(exc)}",
                hint="Set RAG_LLM_API_KEY to a key this server accepts (any value works for a local server).",
            )
        if isinstance(exc, openai.NotFoundError):
            return GenerationError(
                f"The LLM server at {url} does not know model {self.model!r} or the URL path "
                f"(404: {_server_message(exc)}).",
                hint=self._model_hint(),
            )
        if isinstance(exc, openai.RateLimitError):
            return GenerationError(
                f"The LLM server at {url} is rate limiting requests (429, {attempts}): {_server_message(exc)}",
                hint="Wait and ask again, raise RAG_LLM_MAX_RETRIES, or check the account's quota.",
            )
        if isinstance(exc, openai.BadRequestError | openai.UnprocessableEntityError):
            return GenerationError(
                f"The LLM server at {url} rejected the request ({exc.status_code}): {_server_message(exc)}",
                hint="If the prompt is longer than the model's context, lower RAG_EVIDENCE_TOKEN_BUDGET or "
                "RAG_LLM_MAX_TOKENS, or start the server with a larger context (`rag llm serve --ctx 8192`).",
            )
        if isinstance(exc, openai.APIStatusError):
            retried = f", {attempts}" if exc.status_code >= 500 or exc.status_code in (408, 409) else ""
            return GenerationError(
                f"The LLM server at {url} failed with HTTP {exc.status_code}{retried}: {_server_message(exc)}",
                hint="Check the LLM server's log; raise RAG_LLM_MAX_RETRIES for a flaky server.",
            )
        if isinstance(exc, openai.OpenAIError | httpx2.HTTPError | ValueError):
            return GenerationError(
                f"The LLM server at {url} sent a response that could not be used: {exc}",
                hint="Check that RAG_LLM_BASE_URL points at an OpenAI-compatible API (usually ending in /v1).",
            )
        return GenerationError(f"Calling the LLM server at {url} failed: {type(exc).__name__}: {exc}")

    def _model_hint(self) -> str:
        base = "Check RAG_LLM_MODEL, and that RAG_LLM_BASE_URL ends with the API prefix (usually /v1)."
        try:
            models = self.list_models(timeout_s=min(5.0, self.timeout_s))
        except GenerationError:
            return base
        if not models:
            return base
        return f"{base} The server offers: {', '.join(models[:10])}."


def _server_message(exc: openai.APIStatusError) -> str:
    body = exc.body
    if isinstance(body, dict):
        inner = body.get("error", body)
        message = inner.get("message") if isinstance(inner, dict) else inner
        if message:
            return str(message)[:300]
    return (str(exc.message) if exc.message else exc.response.reason_phrase)[:300]


def _cause_text(exc: BaseException) -> str:
    cause = exc.__cause__ or exc.__context__
    return f"{type(cause).__name__}: {cause}" if cause else type(exc).__name__


class StreamResult:
    """A streaming answer: iterate for text deltas; ``.generated`` gives the final Generated with usage.

    Usage comes from the server's last chunk (``stream_options.include_usage``); a server that does not send
    it gets the prompt builder's token count and one completion token per content delta
    (``usage_estimated`` is then True). Reading ``.generated`` before the stream ends reads the rest of it;
    after ``close()`` it holds what arrived until then.
    """

    def __init__(self, client: LLMClient, prompt: Prompt, chunks: Any) -> None:
        self._client = client
        self._prompt = prompt
        self._chunks = chunks
        self._parts: list[str] = []
        self._deltas = 0
        self._model = client.model
        self._usage: tuple[int, int] | None = None
        self._done = False
        self.finish_reason: str | None = None
        self._deltas_iter = self._read()

    def __iter__(self) -> Iterator[str]:
        return self._deltas_iter

    def _read(self) -> Iterator[str]:
        try:
            for chunk in self._chunks:
                if getattr(chunk, "model", None):
                    self._model = chunk.model
                usage = getattr(chunk, "usage", None)
                if usage is not None:
                    self._usage = (usage.prompt_tokens or 0, usage.completion_tokens or 0)
                for choice in chunk.choices or ():
                    if choice.finish_reason:
                        self.finish_reason = choice.finish_reason
                    delta = choice.delta.content if choice.delta else None
                    if delta:
                        self._parts.append(delta)
                        self._deltas += 1
                        yield delta
            if self.finish_reason is None:  # every compatible server ends with one; no end means a cut stream
                raise GenerationError(
                    f"The LLM server at {self._client.base_url} closed the stream before the answer was finished.",
                    hint="Check the LLM server's log: it may have crashed or run out of memory.",
                )
        except GeneratorExit:
            self.finish_reason = self.finish_reason or "cancelled"
            raise
        except GenerationError:
            raise
        except Exception as exc:
            raise self._client.translate(exc) from exc
        finally:
            self._done = True
            self._close_response()

    def close(self) -> None:
        """Stop reading (the server stops generating when the connection closes)."""
        self._deltas_iter.close()  # type: ignore[attr-defined]
        self._done = True
        self._close_response()

    def _close_response(self) -> None:
        close = getattr(self._chunks, "close", None)
        if close is not None:
            with contextlib.suppress(Exception):  # closing a broken connection must not hide the real error
                close()

    @property
    def text(self) -> str:
        """The text received so far."""
        return "".join(self._parts)

    @property
    def usage_estimated(self) -> bool:
        return self._usage is None

    @property
    def generated(self) -> Generated:
        if not self._done:
            for _ in self._deltas_iter:
                pass
        text = self.text.strip()
        if not text:
            raise GenerationError(
                f"The LLM ({self._client.model}) returned an empty answer.",
                hint="Check the server's log; raise RAG_LLM_MAX_TOKENS if the model spends its tokens elsewhere.",
            )
        prompt_tokens, completion_tokens = self._usage or (self._prompt.n_tokens, self._deltas)
        return Generated(
            text=text, model=self._model, prompt_tokens=prompt_tokens, completion_tokens=completion_tokens
        )
