"""Layout checks from the browser's layout boxes (never from pixels): nothing wider than the
window, no element outside its panel, no select whose chosen text is cut."""

from __future__ import annotations

from typing import Any

WIDTHS = (390, 1280, 1920)

_OUTSIDE = """() => {
  const out = [];
  const doc = document.documentElement;
  if (doc.scrollWidth > window.innerWidth) {
    out.push(`the page is ${doc.scrollWidth} px wide in a ${window.innerWidth} px window`);
  }
  const name = (el) => el.id ? `#${el.id}` : `${el.tagName.toLowerCase()}.${el.className}`
    + ` "${(el.textContent || "").trim().slice(0, 30)}"`;
  const shown = (el) => el.getClientRects().length > 0
    && getComputedStyle(el).visibility !== "hidden";
  for (const panel of document.querySelectorAll(".panel, .status-strip, .page-header")) {
    if (!shown(panel)) continue;
    const p = panel.getBoundingClientRect();
    for (const el of panel.querySelectorAll("*")) {
      // Inside a scroller, only the scroller itself must fit (the rest scrolls in it).
      const scroller = el.parentElement.closest(".table-scroll");
      if (scroller && panel.contains(scroller) || !shown(el)) continue;
      if (el.closest(".visually-hidden, .tooltip, svg *")) continue;
      const r = el.getBoundingClientRect();
      if (r.right > p.right + 0.5 || r.left < p.left - 0.5) {
        out.push(`${name(el)} [${Math.round(r.left)}, ${Math.round(r.right)}] outside `
          + `${name(panel)} [${Math.round(p.left)}, ${Math.round(p.right)}]`);
      }
    }
  }
  return out;
}"""

_CUT_SELECTS = """() => {
  const canvas = document.createElement("canvas").getContext("2d");
  const out = [];
  for (const select of document.querySelectorAll("select")) {
    if (!select.getClientRects().length) continue;
    const style = getComputedStyle(select);
    canvas.font = `${style.fontWeight} ${style.fontSize} ${style.fontFamily}`;
    const option = select.selectedOptions[0];
    const text = option ? option.textContent : "";
    // The room for text: the box less its padding, borders and the arrow (about 20 px).
    const room = select.clientWidth - parseFloat(style.paddingLeft)
      - parseFloat(style.paddingRight) - 20;
    if (canvas.measureText(text).width > room) out.push(`${select.id}: "${text}" in ${room} px`);
  }
  return out;
}"""

_TABLES_FIT = """() => [...document.querySelectorAll(".table-scroll")]
  .filter((s) => s.getClientRects().length && s.scrollWidth > s.clientWidth + 1)
  .map((s) => `${s.firstElementChild.id}: ${s.scrollWidth} px in ${s.clientWidth} px`)"""


def outside_their_panels(page: Any) -> list[str]:
    """Elements outside the panel that holds them, and a page wider than its window."""
    return list(page.evaluate(_OUTSIDE))


def cut_selects(page: Any) -> list[str]:
    """Selects too narrow for the text of their chosen option."""
    return list(page.evaluate(_CUT_SELECTS))


def scrolling_tables(page: Any) -> list[str]:
    """Tables wider than their scroller (that then scrolls sideways)."""
    return list(page.evaluate(_TABLES_FIT))


def assert_layout_holds(page: Any, *, tables_fit: bool) -> None:
    assert outside_their_panels(page) == []
    assert cut_selects(page) == []
    if tables_fit:
        assert scrolling_tables(page) == []
