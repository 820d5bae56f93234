"""The support bot's Streamlit app: ``rag ui`` (or ``streamlit run ui/app.py``).

Sign-in comes from the deployment (``RAG_AUTH``, see ui/auth.py): ``proxy`` (identity headers from an
authenticating reverse proxy, the default), ``oidc`` (Streamlit's ``st.login``) or ``demo`` (a labelled user
picker, loopback only; scripts/start.sh sets it). Nobody signed in: a sign-in page, no chat and no answers.
Every page reads the principal from here, and it flows into ``Question(principal=...)`` exactly as
``rag ask --user --groups`` does. The admin pages (analytics, evaluation) are listed for the admin group only,
and refuse anyone else themselves.
"""

from __future__ import annotations

import sys
from pathlib import Path

import streamlit as st

try:
    import ui.services  # noqa: F401  (an installed checkout)
except ImportError:  # `streamlit run ui/app.py` from a source tree that is not installed
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from ui import icon, services

st.set_page_config(
    page_title="Policy support bot", page_icon=icon.page_icon(), layout="wide"
)  # drawn locally

# The page scripts live in ui/views/, not ui/pages/: a folder named "pages" beside the entry script puts Streamlit
# into its older folder-based multipage mode until st.navigation first runs in the process, so the first visit to
# e.g. /traces after a restart would run that page without this script (no layout, no shared sign-in).
PAGES = [
    st.Page("views/chat.py", title="Chat", icon=":material/chat:", url_path="chat", default=True),
    st.Page("views/traces.py", title="Trace explorer", icon=":material/manage_search:", url_path="traces"),
    st.Page("views/documents.py", title="Documents", icon=":material/description:", url_path="documents"),
]
ADMIN_PAGES = [
    st.Page("views/analytics.py", title="Analytics", icon=":material/insights:", url_path="analytics"),
    st.Page("views/evaluation.py", title="Evaluation", icon=":material/monitoring:", url_path="evaluation"),
]

principal = page = None
with services.page_guard():
    settings = services.get_settings()
    st.session_state[services.APP_SIGNS_IN] = True
    principal = services.sign_in_sidebar(settings)
    if principal is None:
        # Every page stays routable (a bookmarked /traces keeps its address), but none runs: sign in first.
        st.navigation(PAGES + ADMIN_PAGES, position="hidden")
        services.render_sign_in(settings)
    else:
        admin = services.is_admin(principal, settings)
        page = st.navigation(PAGES + (ADMIN_PAGES if admin else []))
        if admin:  # where the data lives and how answers are generated: for administrators, not employees
            services.deployment_details(settings)
        # Demo sign-in is labelled once, beside the user picker in the sidebar (services._demo_picker).
if principal is None or page is None:
    st.stop()
page.run()
