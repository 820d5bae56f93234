"""What the pages use from ``rag``: settings, the signed-in principal, the pipeline and the trace store.

Models and clients are created once per process (``st.cache_resource``) and shared by every session. A factory
that fails raises before anything is cached, so the app recovers by itself once the cause goes away (the index
gets built, the database gets migrated, Qdrant comes back). Errors become messages a user can act on; a page
never shows a traceback.
"""

from __future__ import annotations

import importlib.util
import json
import queue
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import streamlit as st

from rag.config import Settings, load_settings
from rag.errors import (
    ConfigurationError,
    EmptyIndexError,
    GenerationError,
    RagError,
    RetrievalError,
    StorageError,
)
from rag.types import Principal
from ui import auth, oidc

if TYPE_CHECKING:  # the heavy modules load lazily, inside the cached constructors
    from rag.models.embedder import Embedder
    from rag.pipeline import Pipeline, PipelineOptions, Question
    from rag.stores.index import IndexReader
    from rag.traces.sweeps import SweepResult
    from rag.tracestore import TraceStore

USERS_FILE = "users.json"
# Demo mode only (RAG_AUTH=demo): the demo users of the sample corpus and their groups.
DEMO_USERS: dict[str, frozenset[str]] = {
    "alice": frozenset({"staff"}),
    "hana": frozenset({"staff", "hr"}),
    "sam": frozenset({"staff", "security"}),
    "olga": frozenset({"staff", "admin"}),  # the demo's administrator: traces of all, analytics, evaluation
}
NOTHING_INDEXED = "Nothing indexed yet: run `rag ingest PATH` to index the policy documents."
DB_NOT_READY = "The trace database is not initialised: run `rag db upgrade`."


# ----------------------------------------------------------------------------- settings and users
def get_settings() -> Settings:
    """The one settings object (``RAG_*`` environment, ``.env``); ``rag ui --data-dir`` sets RAG_DATA_DIR."""
    return load_settings()


def load_users(settings: Settings) -> dict[str, frozenset[str]]:
    """Users who may sign in, with their groups: ``<data_dir>/users.json`` if present, else the demo users.

    ``users.json`` is either ``{"alice": ["staff"], ...}`` or ``{"users": [{"user": "alice", "groups": [...]}]}``.
    """
    path = Path(settings.data_dir) / USERS_FILE
    if not path.is_file():
        return dict(DEMO_USERS)
    try:
        data = json.loads(path.read_text())
        items = data.get("users", data) if isinstance(data, dict) else data
        if isinstance(items, dict):
            users = {str(name): frozenset(map(str, groups or ())) for name, groups in items.items()}
        else:
            users = {
                str(item.get("user") or item["name"]): frozenset(map(str, item.get("groups") or ()))
                for item in items
            }
    except (OSError, ValueError, TypeError, KeyError, AttributeError) as exc:
        raise ConfigurationError(
            f"Cannot read the user list {path}: {exc}",
            hint='Write {"alice": ["staff"], "hana": ["staff", "hr"]} or delete the file to use the demo users.',
        ) from exc
    users = {name.strip(): groups for name, groups in users.items() if name.strip()}
    if not users:
        raise ConfigurationError(f"The user list {path} is empty.", hint="Add at least one user.")
    return users


def is_admin(principal: Principal, settings: Settings | None = None) -> bool:
    """Whether the principal is in the admin group (``RAG_ADMIN_GROUP``) of its identity."""
    return auth.is_admin(principal, settings or get_settings())


# Set by ui/app.py, which signs every run in before the page runs (a page run on its own signs in itself).
APP_SIGNS_IN = "auth_app_signs_in"
# Session keys that hold one user's conversation, open traces, feedback and admin views.
USER_STATE_PREFIXES = ("chat_", "trace_", "replay_", "feedback_", "analytics_", "eval_")


def _switch_user(user: str) -> None:
    """A different user must never see the previous user's conversation, open traces or feedback state."""
    if st.session_state.get("user") != user:
        for key in [k for k in st.session_state if str(k).startswith(USER_STATE_PREFIXES)]:
            del st.session_state[key]
    st.session_state["user"] = user


def request_headers() -> Any:
    """The HTTP headers of this session's request (st.context.headers: repeated headers kept)."""
    try:
        return st.context.headers
    except Exception:  # no request context (a bare script run)
        return {}


def current_identity(settings: Settings) -> auth.Identity | None:
    """Who is signed in, from the deployment: proxy headers, st.user, or (demo) the picker's choice.

    Reads; renders nothing. Proxy headers are read in proxy mode only.
    """
    if settings.auth == "proxy":
        return auth.identity_from_headers(request_headers(), settings)
    if settings.auth == "oidc":
        try:
            info = st.user.to_dict()
        except Exception:
            info = {}
        return auth.identity_from_user_info(info, settings)
    if auth.demo_refusal(st.get_option("server.address"), request_headers()) is not None:
        return None
    users = load_users(settings)
    name = st.session_state.get("user_select") or st.session_state.get("user")
    if isinstance(name, str) and name in users:
        return auth.Identity(Principal(name, users[name]), mode="demo")
    return None


def sign_in_sidebar(settings: Settings) -> Principal | None:
    """Sign the session in and show who it is in the sidebar; None when nobody is signed in.

    Demo mode shows the user picker, labelled as a demo; proxy and OIDC modes show the identity the
    deployment sent, with no way to choose a user or groups.
    """
    if settings.auth == "demo":
        return _demo_picker(settings)
    identity = current_identity(settings)
    if identity is None:
        return None
    _switch_user(identity.user)
    principal = identity.principal
    st.session_state["principal"] = principal
    with st.sidebar:
        st.markdown(f"**Signed in as** {_md_text(identity.user)}")
        if identity.email and identity.email != identity.user:
            st.caption(_md_text(identity.email))
        st.caption("Groups: " + (_md_text(", ".join(sorted(principal.groups))) or "(none)"))
        if settings.auth == "oidc":
            if st.button("Sign out", key="auth_sign_out", icon=":material/logout:", type="tertiary"):
                st.logout()
        elif settings.auth_sign_out_url:
            st.markdown(f"[Sign out]({settings.auth_sign_out_url})")
    return principal


def _md_text(text: str) -> str:
    from ui.components import escape_md

    return escape_md(text)


def _demo_picker(settings: Settings) -> Principal | None:
    refusal = auth.demo_refusal(st.get_option("server.address"), request_headers())
    if refusal is not None:
        return None
    users = load_users(settings)
    names = sorted(users)
    current = st.session_state.get("user")
    index = names.index(current) if current in names else 0
    with st.sidebar:
        st.warning(
            "**Demo sign-in**: anyone can pick any user here. For a deployment, set `RAG_AUTH=proxy` or "
            "`RAG_AUTH=oidc` (docs/ui.md).",
            icon=":material/science:",
        )
        st.markdown("**Signed in as**")
        name = st.selectbox(
            "User (demo)",
            names,
            index=index,
            key="user_select",
            help="Demo only: pick who you are. Your groups decide which documents you may read.",
        )
        groups = users[name]
        st.caption("Groups: " + (", ".join(sorted(groups)) or "(none)"))
    _switch_user(name)
    principal = Principal(name, groups)
    st.session_state["principal"] = principal
    return principal


def render_sign_in(settings: Settings) -> None:
    """The page a session sees when nobody is signed in: why, and what to do. No chat, no answers."""
    st.title("Policy support bot")
    if settings.auth == "demo":
        refusal = auth.demo_refusal(st.get_option("server.address"), request_headers())
        st.error(refusal or "Demo sign-in is not available.", icon=":material/block:")
        return
    st.subheader("Sign in to continue", anchor=False)
    if settings.auth == "proxy":
        st.info(
            "This support bot answers from policies only the people allowed to read them see, so it needs to "
            "know who you are. Your organisation's sign-in did not reach it: open the bot through its sign-in "
            "address (reload this page to be asked to sign in), or ask IT if this keeps happening.",
            icon=":material/lock:",
        )
        return
    # A sign-in that failed comes back here with a code (ui/oidc.py); only its fixed message is shown.
    failure = oidc.message_for(st.query_params.get(oidc.ERROR_PARAM))
    if failure:
        st.error(failure, icon=":material/gpp_bad:")
    st.info("Sign in with your organisation's account to ask about the policies.", icon=":material/lock:")
    if st.button("Sign in", key="auth_sign_in", icon=":material/login:", type="primary"):
        try:
            st.login()
        except Exception as exc:  # no [auth] section in secrets.toml, Authlib missing, ...
            st.error(
                f"Sign-in is not configured on this server ({type(exc).__name__}: {exc}). An administrator "
                "must add an [auth] section to .streamlit/secrets.toml (docs/ui.md).",
                icon=":material/error:",
            )


def deployment_details(settings: Settings) -> None:
    """Where the data lives and how answers are generated, in a closed sidebar expander. ui/app.py shows it to
    administrators only: employees see none of it."""
    from rag.stores.index import current_generation

    generation = f"LLM {settings.llm_model}" if settings.llm_configured else "extractive (no LLM configured)"
    with st.sidebar.expander("Deployment details", icon=":material/settings:"):
        st.caption(f"Data folder: {_md_text(str(settings.data_dir))}")
        st.caption(f"Index generation: {_md_text(current_generation(settings.data_dir) or 'none')}")
        st.caption(f"Answer generation: {_md_text(generation)}")
        st.caption(f"Embedding model: {_md_text(settings.embedding_model)}")
        st.caption(f"Reranker: {_md_text(settings.reranker)}")


def current_principal(settings: Settings) -> Principal:
    """The signed-in principal. Nobody signed in: the sign-in page, and the page stops here.

    A page run on its own (without ui/app.py) signs in itself, so the picker shows in demo mode.
    """
    try:
        identity = current_identity(settings)
    except auth.IdentityError as exc:
        show_error(exc)
        st.stop()
    if identity is not None and identity.mode == "demo" and not st.session_state.get(APP_SIGNS_IN):
        identity = None  # a demo page run on its own draws the picker itself, on every run
    if identity is not None:
        _switch_user(identity.user)
        return identity.principal
    principal = sign_in_sidebar(settings)
    if principal is None:
        render_sign_in(settings)
        st.stop()
    return principal


def require_admin(settings: Settings, page: str) -> Principal:
    """The signed-in principal if it is in the admin group; otherwise a refusal, and the page stops."""
    principal = current_principal(settings)
    if not is_admin(principal, settings):
        st.title(page)
        st.error(
            f"The {page} page is for administrators (members of the `{settings.admin_group}` group). "
            "Your answers are on the Trace explorer page.",
            icon=":material/block:",
        )
        st.stop()
    return principal


# ----------------------------------------------------------------------------- errors
def describe_error(exc: BaseException) -> str:
    """A message a user can act on, for any exception (never a traceback)."""
    if isinstance(exc, EmptyIndexError):
        return NOTHING_INDEXED
    if isinstance(exc, StorageError) and _looks_unmigrated(exc):
        message = exc.user_message()
        return message if "rag db upgrade" in message else f"{DB_NOT_READY}\n\n{message}"
    if isinstance(exc, RetrievalError):
        return f"Search is unavailable (is Qdrant running?): {exc.user_message()}"
    if isinstance(exc, GenerationError):
        return f"The language model failed: {exc.user_message()}"
    if isinstance(exc, RagError):
        return exc.user_message()
    return f"Something went wrong ({type(exc).__name__}: {exc}). Reload the page to try again."


def _looks_unmigrated(exc: StorageError) -> bool:
    text = exc.user_message().lower()
    return any(
        w in text for w in ("db upgrade", "not initialised", "not initialized", "no such table", "migrat")
    )


def show_error(exc: BaseException) -> None:
    st.error(describe_error(exc), icon=":material/error:")


@contextmanager
def page_guard() -> Iterator[None]:
    """Wrap a page body: any exception becomes an ``st.error`` message (Streamlit's own control flow passes)."""
    try:
        yield
    except Exception as exc:  # st.stop()/st.rerun() raise BaseExceptions and pass through
        show_error(exc)


# ----------------------------------------------------------------------------- cached resources
@st.cache_resource(show_spinner="Loading the embedding model...")
def _embedder(model: str, batch_size: int, runtime: str, cache_dir: str | None) -> Embedder:
    from rag.models.embedder import load_embedder

    embedder = load_embedder(model, batch_size, runtime, Path(cache_dir) if cache_dir else None)
    # loads (or, once per machine, exports) the ONNX encoder under the spinner
    embedder.embed_queries(["warm up"])
    return embedder


@st.cache_resource(show_spinner="Opening the index...")
def _reader(settings_json: str) -> IndexReader:
    from rag.stores.qdrant_server import open_index_reader

    # embedded generations, or the Qdrant server when RAG_QDRANT_URL is set (the reader `rag ask` uses);
    # raises EmptyIndexError before anything is cached
    return open_index_reader(Settings.model_validate_json(settings_json))


@st.cache_resource(show_spinner="Loading the models...", max_entries=4)
def _pipeline(settings_json: str, generation: str | None) -> Pipeline:
    """One pipeline per settings and published generation, built as `rag ask` builds it (rag/factory.py):
    the reranker reads the generation's stored sentence vectors and passage tokens, and the query-vector
    cache and the per-generation indexes live as long as the generation serves."""
    from rag.factory import build_pipeline

    settings = Settings.model_validate_json(settings_json)
    return build_pipeline(
        settings,
        reader=_reader(settings_json),
        embedder=_embedder(
            settings.embedding_model,
            settings.embed_batch_size,
            settings.embedding_runtime,
            str(settings.model_cache_dir) if settings.model_cache_dir else None,
        ),
    )


@st.cache_resource(show_spinner=False)
def _trace_store(url: str, settings_json: str) -> TraceStore:
    from rag.tracestore import TraceStore

    store = TraceStore.from_settings(Settings.model_validate_json(settings_json))
    check_ready(store)  # an unmigrated database raises here, before the store is cached
    return store


def check_ready(store: Any) -> None:
    """Raise a StorageError unless the trace database exists and is at the schema this code expects."""
    ready = getattr(store, "check_ready", None)
    if ready is not None:
        ready()
    else:  # any read checks the schema first
        store.sessions.list("\x00ready-probe", limit=1)


def _key(settings: Settings) -> str:
    return settings.model_dump_json()


def get_reader(settings: Settings) -> IndexReader:
    """The shared index reader; it switches to a newly published generation on ``refresh()``."""
    reader = _reader(_key(settings))
    reader.refresh()
    return reader


def get_pipeline(settings: Settings) -> Pipeline:
    """The shared pipeline for the published generation. Traces are saved by the pages (``save_trace``), not by
    the pipeline."""
    from rag.stores.index import current_generation

    return _pipeline(_key(settings), current_generation(settings.data_dir))


def get_store(settings: Settings) -> TraceStore:
    """The shared trace store, checked on every call (a dropped database is reported, not cached)."""
    store = _trace_store(settings.sqlalchemy_url, _key(settings))
    check_ready(store)
    return store


def try_store(settings: Settings) -> tuple[TraceStore | None, BaseException | None]:
    """The trace store, or (None, the error) when it is not usable."""
    try:
        return get_store(settings), None
    except Exception as exc:
        return None, exc


# ----------------------------------------------------------------------------- streaming answers
class _TeeLLM:
    """An LLM client that streams every completion and hands each text delta to ``sink``.

    The pipeline calls ``complete``; this wrapper answers it from ``stream`` so the chat page can show the
    answer as it arrives while the pipeline still gets the whole ``Generated`` back (and checks citations).
    """

    def __init__(self, inner: Any, sink: Callable[[str], None]) -> None:
        self._inner = inner
        self._sink = sink
        self._calls = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    def complete(self, prompt: Any, **kwargs: Any) -> Any:
        if self._calls:
            self._sink("\n\n")
        self._calls += 1
        stream = self._inner.stream(prompt, **kwargs)
        for delta in stream:
            self._sink(delta)
        return stream.generated

    def stream(self, prompt: Any, **kwargs: Any) -> Any:
        return self._inner.stream(prompt, **kwargs)


_DONE = object()


@dataclass
class StreamingAnswer:
    """A running answer: iterate ``deltas()`` (e.g. with ``st.write_stream``), then read ``result()``."""

    _queue: queue.Queue[Any]
    _thread: threading.Thread
    _box: dict[str, Any]

    def deltas(self) -> Iterator[str]:
        while True:
            item = self._queue.get()
            if item is _DONE:
                return
            yield item

    def result(self) -> Any:
        self._thread.join()
        if "error" in self._box:
            raise self._box["error"]
        return self._box["result"]


def ask_streaming(
    pipeline: Pipeline, question: Question, options: PipelineOptions | None = None
) -> StreamingAnswer:
    """Run ``pipeline.ask`` in a worker thread whose LLM streams its text into a queue.

    The worker never calls Streamlit; the page's script thread drains the queue.
    """
    q: queue.Queue[Any] = queue.Queue()
    # The shared pipeline answers; only this request's LLM client is wrapped to stream into the queue.
    tee = _TeeLLM(pipeline.llm, q.put)
    box: dict[str, Any] = {}

    def run() -> None:
        try:
            box["result"] = pipeline.ask(question, options, llm=tee)
        except BaseException as exc:  # handed to the script thread by result()
            box["error"] = exc
        finally:
            q.put(_DONE)

    thread = threading.Thread(target=run, name="rag-answer", daemon=True)
    thread.start()
    return StreamingAnswer(q, thread, box)


# ----------------------------------------------------------------------------- evaluation
SWEEP_RUNNER_MISSING = (
    "The evaluation package is not installed beside the app, so sweeps cannot be run here; "
    "saved sweeps still load."
)


def sweep_runner_available() -> bool:
    """Whether ``python -m evaluation`` (which runs position sweeps) is installed beside the app."""
    return importlib.util.find_spec("evaluation") is not None


@dataclass(frozen=True)
class SweepRequest:
    """What the Evaluation page's form asks of ``rag eval position``."""

    generator: str
    retrieval: str
    repeats: int
    lengths: tuple[str, ...]
    strategies: tuple[str, ...]
    limit: int | None
    control: bool
    spacing: bool

    def argv(self, data_dir: Path, out: Path) -> list[str]:
        return [
            *("--data-dir", str(data_dir), "--out", str(out)),
            *("--generator", self.generator, "--retrieval", self.retrieval, "--repeats", str(self.repeats)),
            *("--lengths", ",".join(self.lengths), "--strategies", ",".join(self.strategies)),
            *(("--limit", str(self.limit)) if self.limit else ()),
            "--control" if self.control else "--no-control",
            "--spacing" if self.spacing else "--no-spacing",
        ]


def run_sweep(settings: Settings, request: SweepRequest, out: Path) -> SweepResult:
    """Run ``rag eval position`` in a child process and read back the sweep it wrote to ``out``.

    The sweep lives in ``evaluation/`` (it ingests nothing, but it grades, and ui/ imports only rag/): the page
    starts the same command an admin would type, with the same ``RAG_*`` environment, and reads its files through
    ``rag.traces.sweeps``. The arguments are a list (no shell); the form offers only fixed choices and numbers."""
    from rag.traces.sweeps import load_sweep

    command = [sys.executable, "-m", "evaluation", "position", *request.argv(Path(settings.data_dir), out)]
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    if done.returncode != 0:  # the command prints "Error: ..." and "Hint: ..." for a user's mistake
        lines = [line.strip() for line in (done.stderr or done.stdout).splitlines() if line.strip()]
        error = next(
            (x for x in reversed(lines) if x.startswith("Error:")), lines[-1] if lines else "no message"
        )
        hint = next((x.removeprefix("Hint:").strip() for x in reversed(lines) if x.startswith("Hint:")), None)
        raise RagError(
            f"The sweep failed (exit status {done.returncode}): {error.removeprefix('Error:').strip()}",
            hint=hint or "Run the same sweep with `rag eval position` to see its full output.",
        )
    return load_sweep(out)
