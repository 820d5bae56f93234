"""``python -m evaluation.peer``."""

from evaluation.peer.cli import main

raise SystemExit(main())
