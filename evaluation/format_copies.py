"""Copies of the policy corpora in the formats a real policy library holds, to measure ingestion on them.

``python -m evaluation.format_copies scanned --out DIR`` writes, for every PDF of each policy corpus, an
image-only copy as a scanner would make it: each page rasterised at 200 dpi in grey, turned by a small random
angle (up to 1.5 degrees either way), with light noise; about one page in 25 is turned upside down and one in 50 a
quarter turn. No text layer survives: every word must come back through OCR.

``python -m evaluation.format_copies pdf --out DIR`` links the born-digital PDFs those scans were made from (the
dev corpus's handbook as its PDF rendering, not its Markdown): the reference a scanned run is compared with.

``python -m evaluation.format_copies docx --out DIR`` / ``html --out DIR`` convert each corpus's Markdown sources
with Debian's ``pandoc`` into Word files, or into HTML pages wrapped in an intranet site's page (a cookie
banner, header with navigation and search, breadcrumb, sidebar, footer and scripts around the content), the way
an intranet export looks. Corpora without Markdown sources keep their PDFs (the dev corpus's EPA PDFs), so a
folder mixes formats as a real one does.

Each corpus lands in ``DIR/<corpus>/`` with its sidecar and folder metadata renamed to the copies' names, and
``rag eval suite --copies DIR`` then ingests and asks those instead of the originals (docs/evaluation.md,
"Scans, Word and HTML"). Every choice is seeded: the same command writes the same files.
"""

from __future__ import annotations

import json
import random
import re
import shutil
import subprocess
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Annotated, Any

import typer

from evaluation.datasets import default_questions_path

SCAN_DPI = 200
MAX_SKEW_DEG = 1.5
NOISE_SIGMA = 8.0
UPSIDE_DOWN_EVERY = 25
QUARTER_TURN_EVERY = 50
SEED = 20261207
CORPORA = ("dev", "gitlab", "moj", "hypha", "sample")


def _policies(shared: Path) -> Path:
    return shared / "data" / "policies"


def pdf_sources(shared: Path, corpus: str) -> list[Path]:
    """The folders of born-digital PDFs of ``corpus`` (the dev corpus's handbook as its PDF rendering)."""
    p = _policies(shared)
    return {
        "dev": [p / "civicactions-handbook/pdf", p / "epa-infosec"],
        "gitlab": [p / "gitlab-people"],
        "moj": [p / "moj-handbook/pdf"],
        "hypha": [p / "hypha-handbook/pdf"],
        "sample": [default_questions_path().parent / "pdfs"],
    }[corpus]


def markdown_sources(shared: Path, corpus: str) -> tuple[list[Path], list[Path]]:
    """(folders of Markdown to convert, folders of PDFs kept as they are) for ``corpus``; ([], []) when it has no
    Markdown sources."""
    p = _policies(shared)
    return {
        "dev": ([p / "civicactions-handbook/markdown"], [p / "epa-infosec"]),
        "gitlab": ([p / "gitlab-people-markdown"], []),
        "sample": ([default_questions_path().parent / "sources"], []),
    }.get(corpus, ([], []))


# ---------------------------------------------------------------------------------------------------------
# Scans


def scan_pdf(source: Path, target: Path, *, seed: str) -> int:
    """An image-only copy of ``source`` at ``target``, as scanned; returns its pages."""
    rng = random.Random(seed)
    images = []
    for image in render_pages(source):
        roll = rng.random()
        turn = (
            rng.choice([90, 270])
            if roll < 1 / QUARTER_TURN_EVERY
            else 180
            if roll < 1 / QUARTER_TURN_EVERY + 1 / UPSIDE_DOWN_EVERY
            else 0
        )
        angle = rng.uniform(-MAX_SKEW_DEG, MAX_SKEW_DEG)
        images.append(scan_image(image, turn=turn, skew=angle, noise_seed=rng.randrange(2**32)))
    write_image_pdf(images, target)
    return len(images)


def render_pages(source: Path | bytes, dpi: int = SCAN_DPI) -> list[Any]:
    """Every page of a PDF (a path or its bytes) as a greyscale PIL image at ``dpi``."""
    import pypdfium2 as pdfium

    pdf = pdfium.PdfDocument(source if isinstance(source, bytes) else str(source))
    try:
        return [pdf[n].render(scale=dpi / 72).to_pil().convert("L") for n in range(len(pdf))]
    finally:
        pdf.close()


def scan_image(
    image: Any, *, turn: int = 0, skew: float = 0.0, noise: float = NOISE_SIGMA, noise_seed: int = 0
) -> Any:
    """``image`` as a scanner would give it back: turned by ``turn`` degrees (0, 90, 180, 270), skewed by
    ``skew`` degrees, with Gaussian noise of standard deviation ``noise`` grey levels."""
    import numpy as np
    from PIL import Image

    if turn:
        image = image.rotate(turn, expand=turn in (90, 270), fillcolor=255)
    if skew:
        image = image.rotate(skew, resample=Image.Resampling.BICUBIC, fillcolor=255)
    if noise:
        grain = np.random.default_rng(noise_seed).normal(0, noise, (image.height, image.width))
        image = Image.fromarray(np.clip(np.asarray(image, dtype=np.float32) + grain, 0, 255).astype(np.uint8))
    return image


def write_image_pdf(images: Sequence[Any], target: Path, dpi: int = SCAN_DPI) -> None:
    """An image-only PDF, one page per image (JPEG-compressed, as scanners write them)."""
    target.parent.mkdir(parents=True, exist_ok=True)
    images[0].save(target, save_all=True, append_images=list(images[1:]), resolution=dpi, quality=85)


def write_born_digital(
    shared: Path, out: Path, corpora: Sequence[str], log: Callable[[str], None] = print
) -> None:
    for corpus in corpora:
        folder = out / corpus
        folder.mkdir(parents=True, exist_ok=True)
        n = 0
        for source_dir in pdf_sources(shared, corpus):
            for pdf in sorted(source_dir.glob("*.pdf")):
                target = folder / pdf.name
                if not target.exists():
                    target.symlink_to(pdf.resolve())
                n += 1
            _copy_metadata(source_dir, folder, rename=lambda name: name)
        log(f"{corpus}: {n} born-digital PDFs linked in {folder}")


def write_scanned(
    shared: Path, out: Path, corpora: Sequence[str], log: Callable[[str], None] = print
) -> None:
    for corpus in corpora:
        folder = out / corpus
        pages = files = 0
        for source_dir in pdf_sources(shared, corpus):
            for pdf in sorted(source_dir.glob("*.pdf")):
                target = folder / pdf.name
                if not target.exists():
                    pages += scan_pdf(pdf, target, seed=f"{SEED}:{corpus}:{pdf.name}")
                files += 1
            _copy_metadata(source_dir, folder, rename=lambda name: name)
        log(f"{corpus}: {files} scanned PDFs in {folder} ({pages} pages written this run)")


# ---------------------------------------------------------------------------------------------------------
# Word and HTML


_FRONT_MATTER = re.compile(r"\A---[ \t]*\n(.*?\n)?(?:---|\.\.\.)[ \t]*\n", re.DOTALL)
_SHORTCODE_LINE = re.compile(r"^[ \t]*\{\{[<%].*?[%>]\}\}[ \t]*$\n?", re.MULTILINE)
_SHORTCODE = re.compile(r"\{\{[<%].*?[%>]\}\}")
_HTML_COMMENT = re.compile(r"<!--.*?-->", re.DOTALL)
_IMAGE = re.compile(r"!\[[^\]]*\]\([^)]*\)|<img\b[^>]*>", re.IGNORECASE)


def prepare_markdown(text: str) -> tuple[str, str | None]:
    """A page's Markdown ready for pandoc, and its front-matter title: front matter, Hugo shortcodes, HTML comments
    and images dropped (what the PDFs' renderer dropped too)."""
    title = None
    match = _FRONT_MATTER.match(text)
    if match:
        found = re.search(r"^title:[ \t]*(.+?)[ \t]*$", match.group(1) or "", re.MULTILINE)
        title = found.group(1).strip("\"'") if found else None
        text = text[match.end() :]
    text = _SHORTCODE_LINE.sub("", text)
    text = _SHORTCODE.sub("", text)
    return _IMAGE.sub("", _HTML_COMMENT.sub("", text)), title


def pandoc(markdown: str, to: str, target: Path | None = None, title: str | None = None) -> str:
    """``markdown`` (GitHub-flavoured) converted by pandoc ``to`` a format; written to ``target`` when given."""
    if shutil.which("pandoc") is None:
        raise typer.BadParameter("pandoc is not installed (Debian: apt-get install pandoc).")
    command = ["pandoc", "-f", "gfm", "-t", to]
    if title:
        command += ["--metadata", f"title={title}"]
        if to == "docx":
            command += ["--standalone"]
    if target is not None:
        command += ["-o", str(target)]
    done = subprocess.run(command, input=markdown, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"pandoc failed: {done.stderr.strip()[:300]}")
    return done.stdout


SITE_PAGE = """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>{title} | People &amp; Policies | Acme Intranet</title>
<link rel="stylesheet" href="/static/site.css">
<script>window.dataLayer = window.dataLayer || []; function gtag(){{dataLayer.push(arguments);}}
gtag("js", new Date()); gtag("config", "G-XXXXXXX");</script></head>
<body>
<div class="cookie-banner" role="dialog">We use cookies to make the intranet work and to understand how it is used.
<button>Accept all cookies</button> <button>Reject optional cookies</button> <a href="/cookies">Cookie settings</a></div>
<header class="site-header"><a class="logo" href="/">Acme Intranet</a>
<nav aria-label="Main"><ul><li><a href="/news">News</a></li><li><a href="/people">People &amp; Policies</a></li>
<li><a href="/it">IT Help</a></li><li><a href="/finance">Finance</a></li><li><a href="/directory">Directory</a></li></ul></nav>
<form class="search" action="/search"><input type="search" name="q" placeholder="Search the intranet"><button>Search</button></form>
</header>
<div class="page"><aside class="sidebar"><h2>In this section</h2><ul>
<li><a href="/people/benefits">Benefits</a></li><li><a href="/people/leave">Time off and leave</a></li>
<li><a href="/people/expenses">Expenses</a></li><li><a href="/people/security">Security</a></li>
<li><a href="/people/onboarding">Onboarding</a></li></ul>
<div class="promo">Have your say: the staff survey closes on Friday. <a href="/survey">Take the survey</a></div></aside>
<main><nav class="breadcrumb" aria-label="Breadcrumb"><a href="/">Home</a> &rsaquo; <a href="/people">People &amp; Policies</a>
&rsaquo; {title}</nav>
<article>
{heading}{body}
</article>
<div class="page-feedback">Was this page helpful? <button>Yes</button> <button>No</button></div>
<p class="last-updated">Page owner: People Team. Report a problem with this page.</p></main></div>
<footer class="site-footer"><ul><li><a href="/accessibility">Accessibility</a></li><li><a href="/privacy">Privacy notice</a></li>
<li><a href="/terms">Terms of use</a></li><li><a href="/contact">Contact the People Team</a></li></ul>
<p>&copy; 2026 Acme Corporation. All rights reserved. Internal use only.</p></footer>
<script src="/static/analytics.js"></script><script>document.querySelectorAll(".cookie-banner button")
.forEach(b => b.addEventListener("click", () => b.parentElement.remove()));</script>
</body></html>
"""


def html_page(markdown: str, title: str | None) -> str:
    import html

    body = pandoc(markdown, "html")
    has_heading = re.search(r"<h1[ >]", body) is not None
    heading = f"<h1>{html.escape(title)}</h1>\n" if title and not has_heading else ""
    return SITE_PAGE.format(title=html.escape(title or "Policy"), heading=heading, body=body)


def write_converted(
    shared: Path, out: Path, corpora: Sequence[str], fmt: str, log: Callable[[str], None] = print
) -> None:
    suffix = {"docx": ".docx", "html": ".html"}[fmt]
    for corpus in corpora:
        markdown_dirs, pdf_dirs = markdown_sources(shared, corpus)
        if not markdown_dirs:
            log(f"{corpus}: no Markdown sources; not copied")
            continue
        folder = out / corpus
        folder.mkdir(parents=True, exist_ok=True)
        n = 0
        for source_dir in markdown_dirs:
            for md in sorted(source_dir.rglob("*.md")):
                name = "__".join(md.relative_to(source_dir).with_suffix(suffix).parts)
                target = folder / name
                if not target.exists():
                    text, title = prepare_markdown(md.read_text(encoding="utf-8"))
                    if fmt == "docx":
                        pandoc(text, "docx", target, title=title)
                    else:
                        target.write_text(html_page(text, title), encoding="utf-8")
                n += 1
            if corpus == "sample":  # the sample's metadata sits beside its PDFs: renamed for the copies
                _copy_metadata(
                    pdf_sources(shared, corpus)[0], folder, rename=lambda s: s.replace(".pdf", suffix)
                )
            else:
                _copy_metadata(source_dir, folder, rename=lambda s: s.replace(".md", suffix))
        for source_dir in pdf_dirs:
            for pdf in sorted(source_dir.glob("*.pdf")):
                if not (folder / pdf.name).exists():
                    shutil.copy2(pdf, folder / pdf.name)
                n += 1
            _copy_metadata(source_dir, folder, rename=lambda name: name)
        log(f"{corpus}: {n} files ({fmt} and kept PDFs) in {folder}")


def _copy_metadata(source_dir: Path, folder: Path, rename: Callable[[str], str]) -> None:
    """Sidecars ``X.meta.json`` and the folder's ``_meta.json`` (its globs renamed) for the copies."""
    for sidecar in sorted(source_dir.glob("*.meta.json")):
        shutil.copy2(sidecar, folder / rename(sidecar.name))
    manifest = source_dir / "_meta.json"
    if manifest.is_file():
        rules = json.loads(manifest.read_text(encoding="utf-8"))
        (folder / "_meta.json").write_text(json.dumps({rename(k): v for k, v in rules.items()}, indent=1))


app = typer.Typer(add_completion=False, help=__doc__)
Out = Annotated[Path, typer.Option("--out", help="Where the copies go (one folder per corpus).")]
Shared = Annotated[Path, typer.Option("--shared", help="The shared data folder.")]
Which = Annotated[str, typer.Option("--corpora", help="Comma-separated: dev,gitlab,moj,hypha,sample.")]


@app.command()
def scanned(
    out: Out, shared: Shared = Path("../shared"), corpora: Which = "dev,gitlab,moj,hypha,sample"
) -> None:
    """Image-only scans of every PDF."""
    write_scanned(shared, out, [c for c in corpora.split(",") if c])


@app.command()
def pdf(out: Out, shared: Shared = Path("../shared"), corpora: Which = "dev,gitlab,moj,hypha,sample") -> None:
    """The born-digital PDFs the scans are made from (links), the reference a scanned run is compared with."""
    write_born_digital(shared, out, [c for c in corpora.split(",") if c])


@app.command()
def docx(out: Out, shared: Shared = Path("../shared"), corpora: Which = "dev,gitlab,sample") -> None:
    """Word files from the Markdown sources."""
    write_converted(shared, out, [c for c in corpora.split(",") if c], "docx")


@app.command()
def html(out: Out, shared: Shared = Path("../shared"), corpora: Which = "dev,gitlab,sample") -> None:
    """Intranet HTML pages from the Markdown sources."""
    write_converted(shared, out, [c for c in corpora.split(",") if c], "html")


if __name__ == "__main__":
    app()
