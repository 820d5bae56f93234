"""The support bot's Streamlit app: ``rag ui`` (or ``streamlit run ui/app.py``).

Sign-in is a stand-in: the sidebar lets you pick a user from ``<data_dir>/users.json`` (or the demo users); in
production this is where single sign-on would supply the user and their groups. Every page reads the principal
from here, and it flows into ``Question(principal=...)`` exactly as ``rag ask --user --groups`` does.
"""

from __future__ import annotations

import sys
from pathlib import Path

import streamlit as st

try:
    import ui.services  # noqa: F401  (an installed checkout)
except ImportError:  # `streamlit run ui/app.py` from a source tree that is not installed
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from ui import services

st.set_page_config(page_title="Policy support bot", page_icon=":material/support_agent:", layout="wide")

# The page scripts live in ui/views/, not ui/pages/: a folder named "pages" beside the entry script puts Streamlit
# into its older folder-based multipage mode until st.navigation first runs in the process, so the first visit to
# e.g. /traces after a restart would run that page without this script (no layout, no shared sign-in).
PAGES = [
    st.Page("views/chat.py", title="Chat", icon=":material/chat:", url_path="chat", default=True),
    st.Page("views/traces.py", title="Trace explorer", icon=":material/manage_search:", url_path="traces"),
    st.Page("views/documents.py", title="Documents", icon=":material/description:", url_path="documents"),
    st.Page("views/evaluation.py", title="Evaluation", icon=":material/monitoring:", url_path="evaluation"),
]

page = st.navigation(PAGES)
signed_in = False
with services.page_guard():
    settings = services.get_settings()
    services.sign_in_sidebar(settings)
    with st.sidebar:
        st.caption(
            f"Data: `{settings.data_dir}` · generation: "
            + (
                "LLM `" + settings.llm_model + "`"
                if settings.llm_configured
                else "extractive (no LLM configured)"
            )
        )
    signed_in = True
if not signed_in:
    st.stop()
page.run()
