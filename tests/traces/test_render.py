"""The terminal view of an answer (rag/traces/render.py): key sentences bold, headings dim, no text read as markup."""

from __future__ import annotations

from rag.traces.render import answer_text


def test_the_key_sentence_is_bold_and_document_text_is_never_markup() -> None:
    answer = (
        "General principles \u2014 Costs are never repaid. Examples include [red]minibar[/red] items. [1]"
    )
    trace = {
        "answer": answer,
        "excerpts": [
            {"heading": "General principles", "key": ["Examples include [red]minibar[/red] items."]}
        ],
    }
    text = answer_text(trace)
    assert text.plain == answer  # "[red]" is shown as written, not read as a style
    styles = {(answer[span.start : span.end], str(span.style)) for span in text.spans}
    assert ("Examples include [red]minibar[/red] items.", "bold") in styles
    assert ("General principles", "dim") in styles
    assert not any(s == "bold" and "never repaid" in t for t, s in styles)
    assert answer_text({"answer": "A model's answer [1]"}).spans == []
