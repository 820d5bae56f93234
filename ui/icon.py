"""The app's page icon, drawn here: a named icon (":material/...") or an emoji makes the browser fetch the
favicon from an external font or emoji host, which fails offline and leaks that someone opened the app."""

from __future__ import annotations

from functools import lru_cache
from typing import Any


@lru_cache(maxsize=1)
def page_icon() -> Any:
    """A 64 x 64 speech bubble with a question mark (a PIL image; Streamlit serves it from this server)."""
    from PIL import Image, ImageDraw

    image = Image.new("RGBA", (64, 64), (0, 0, 0, 0))
    draw = ImageDraw.Draw(image)
    draw.rounded_rectangle((4, 6, 60, 46), radius=12, fill=(28, 111, 209, 255))
    draw.polygon([(16, 44), (30, 44), (14, 58)], fill=(28, 111, 209, 255))
    draw.arc((22, 12, 42, 30), start=180, end=90, fill="white", width=5)
    draw.line((32, 30, 32, 34), fill="white", width=5)
    draw.ellipse((29, 37, 35, 43), fill="white")
    return image
