"""The rendered book in a real browser, as a reader meets it: offline, at desktop and at phone width.

``make test-browser`` (the last step of ``make test``, after the book is built) serves ``_build/html`` on 127.0.0.1
and opens every page of ``_toc.yml`` in Debian's Chromium, driven by Playwright, at 1280 px and at 390 px. Every
request to another origin is blocked and is a failure. On every page, at both widths:

- no request leaves 127.0.0.1, no request fails, no console error, no uncaught page error;
- every display equation of the source is typeset (MathJax's display containers, counted against the ``$$`` and
  ``\\begin{…}`` blocks of the notebook's markdown), every inline one too, and no raw ``\\begin``, ``\\frac``, ``$$``,
  ``\\(`` or ``\\[`` is visible outside code;
- every image has loaded (``naturalWidth > 0``), every stored widget output is drawn with a visible size, and no
  figure is shrunk below 55% of its width (its text would be under 7 px: a phone needs panels stacked);
- no element is wider than the viewport unless it sits in a scroll container (equations, code and wide tables
  scroll; the page does not), nothing is cut off where no scrolling reaches it (a tagged equation centred in a box
  narrower than itself), and every check verdict is wrapped, not scrolled;
- at 390 px, on a page of each kind (``PHONE_NAVIGATION_PAGES``): the table of contents and the page's contents open
  from the buttons a reader sees, and a link in each works (the page's contents jump to the section; the table of
  contents opens another page);
- every live widget (``tutorial_lib/widgets/_live.py``) is driven: each button of its toggles clicked, its slider
  moved with the arrow keys on its focused handle (its handle on the screen at 390 px too), at least three states;
  after each move the picture shown changes and the label of the view shown names every control's value;
- axe-core (npm, pinned in ``tools/book_assets.py``, injected from ``.book-assets/``) finds no serious or critical
  violation of WCAG 2.x A/AA (at 390 px on a page of each kind, ``AXE_PHONE_PAGES``); every image of the article has an alt text that says what it shows (not a file name);
- the page's HTML and the images it loads weigh under 2 MB;
- every cell that holds an exercise's answer (``tools/answer_overlap.py``) is folded: closed, its code hidden, the
  line on the fold naming the exercise to try first (also for a screen reader); a click on it shows the code.

Once: the search finds "softmax" and leads to chapter 03; chapter 03 with the theme in dark mode passes every check
above, its figures are opaque, and axe-core's colour contrast holds in dark colours. A failure names the page, the
width and what was wrong. The pages run a few at a time in one browser; the run's summary line (printed when the
audit ends and again after the last test) counts pages, live widgets, states, checks and axe-core's violations by
rule, and splits the time among the parts of the audit.

``BOOK_SCREENSHOTS=DIR`` also saves chapter 03 at both widths into DIR (``make screenshots``, for the README);
``BOOK_PAGES=chapters/03_scaled_dot_product_attention,intro`` audits only those pages (while fixing one).
The browser tests are marked ``browser`` and left out of a plain ``pytest tests`` (the book must be built first);
the helpers' own tests at the end run with the unit tests.
"""

from __future__ import annotations

import asyncio
import functools
import http.server
import os
import re
import shutil
import sys
import threading
import time
import urllib.parse
from dataclasses import dataclass, field
from pathlib import Path

import nbformat
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tools"))  # tools/ holds scripts, not a package
from book_assets import AXE  # noqa: E402
from book_pages import toc_files as toc_pages  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
HTML = ROOT / "_build" / "html"
WIDTHS = {"desktop": 1280, "phone": 390}
HEIGHT = {"desktop": 800, "phone": 844}
PARALLEL_PAGES = 4  # MathJax and the widget manager are CPU-bound: a few pages at once keep two cores busy
SCREENSHOT_PAGE = "chapters/03_scaled_dot_product_attention"
# Where the README's screenshots look: Eq. (1) and its table on a desktop, a figure of small multiples on a phone.
SCREENSHOT_TARGETS = {"desktop": "#the-equation", "phone": "#what-a-large-score-does-to-the-softmax .cell_output img"}
VERDICT = r"^\d\d\.\w+: .*?\(\d+/\d+ points?\)"  # a check's verdict, as tutorial_lib/checks/core.py prints it
# A figure's 10 pt text is 12.5 px at the figures' 90 dpi; shown at less than 55% of its width it falls below 7 px.
MINIMUM_FIGURE_SCALE = 0.55
# Item 1 of the issue: a page and the images it loads stay under 2 MB (a phone on a slow network).
MAXIMUM_PAGE_BYTES = 2_000_000
# A live widget (tutorial_lib/widgets/_live.py) is driven through at least this many states, each control moved.
MINIMUM_WIDGET_STATES = 3
# axe-core's rules for WCAG 2.0, 2.1 and 2.2 at levels A and AA; a serious or critical violation fails the page.
AXE_TAGS = ["wcag2a", "wcag2aa", "wcag21a", "wcag21aa", "wcag22aa"]
AXE_FAILING_IMPACTS = ("serious", "critical")
# Colour contrast (axe-core's slowest rule: ~15 ms per text element on a chapter's 18,000-element page, two thirds of
# the suite's axe time) is checked on every page at 1280 px, and at 390 px and in dark mode on DARK_PAGE only: the
# colours of text and of what lies behind it do not depend on the width (the theme's and book.css's media queries
# change layout, not colour), and DARK_PAGE at 390 px checks that this stays so. Every other rule runs everywhere.
AXE_CONTRAST = ("desktop",)
# The chapter opened once more with the theme in dark mode (its figures and widgets must stay readable there).
DARK_PAGE = "chapters/03_scaled_dot_product_attention"
# The phone's navigation (the sidebars' buttons and a link in each) is the theme's, the same on every page: it is
# driven on one page of each kind (the front page, a chapter, the paper's page, a solutions page), not on all 33. It was
# a fifth of the suite's page-seconds when every page drove it (128 of 693 on 2026-11-28).
PHONE_NAVIGATION_PAGES = ("intro", DARK_PAGE, "traceability", "solutions/15_data_parallel")
# axe-core at 390 px runs on those pages of each kind only. Its rules read the DOM, which is the same at both widths:
# the media queries show or hide the theme's chrome (the sidebars' buttons, the header), the same on every page, and
# reflow the rest. What the width can change (what is visible, target sizes, contrast) is checked on a page of each
# kind; the rules at 1280 px still cover every page. axe-core took 479 of the suite's 975 page-seconds with every page
# audited at both widths, 292 of 815 this way (2026-11-29).
AXE_PHONE_PAGES = PHONE_NAVIGATION_PAGES


# --- what the sources say the pages must show ---------------------------------------------------------------------


def _markdown_of(page: str, root: Path = ROOT) -> str:
    """The markdown a page is built from: a notebook's markdown cells (and markdown outputs), or the .md file."""
    notebook = root / f"{page}.ipynb"
    if notebook.exists():
        texts = []
        for cell in nbformat.read(notebook, as_version=4).cells:
            if cell.cell_type == "markdown":
                texts.append(cell.source)
            elif cell.cell_type == "code":
                for output in cell.get("outputs", []):
                    texts.extend(output.get("data", {}).get(mime, "") for mime in ("text/markdown", "text/latex"))
        return "\n\n".join(texts)
    return (root / f"{page}.md").read_text(encoding="utf-8")


def _folded_prompts(page: str, root: Path = ROOT) -> list[str]:
    """The line shown on each folded cell of a page (an exercise's answer, ``tools/answer_overlap.py``), in order."""
    notebook = root / f"{page}.ipynb"
    if not notebook.exists():
        return []
    return [cell.metadata["mystnb"]["code_prompt_show"] for cell in nbformat.read(notebook, as_version=4).cells
            if cell.cell_type == "code" and "hide-input" in cell.metadata.get("tags", [])]


FENCE = re.compile(r"^(?P<fence>```+|~~~+)(?P<info>[^\n]*)\n.*?^(?P=fence)\s*$", re.MULTILINE | re.DOTALL)
INLINE_CODE = re.compile(r"(`+)(?!`).+?(?<!`)\1(?!`)", re.DOTALL)
DOLLARS = re.compile(r"\$\$.+?\$\$", re.DOTALL)
AMSMATH = re.compile(r"^\s*\\begin\{(?:equation|multline|gather|align|alignat|flalign|eqnarray)\*?\}", re.MULTILINE)


def display_equations(markdown: str) -> int:
    """How many display equations the markdown holds: ``$$…$$`` blocks, top-level amsmath environments and
    ``{math}`` directives; code (fenced or inline) does not count."""
    math_directives = sum(1 for match in FENCE.finditer(markdown) if match["info"].strip().startswith("{math}"))
    prose = INLINE_CODE.sub("", FENCE.sub("", markdown))
    blocks = len(DOLLARS.findall(prose))
    return math_directives + blocks + len(AMSMATH.findall(DOLLARS.sub("", prose)))


# --- the browser ----------------------------------------------------------------------------------------------------


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args: object) -> None:  # one line per request would drown the test output
        pass


@dataclass
class PageReport:
    page: str
    width: str
    problems: list[str] = field(default_factory=list)
    checks: int = 0
    widgets: int = 0  # live widgets driven
    states: int = 0  # distinct states they were driven through (their first state included)
    axe: dict[str, int] = field(default_factory=dict)  # serious/critical violations: rule -> elements
    seconds: dict[str, float] = field(default_factory=dict)  # what each part of the audit took (the summary's split)

    def timed(self, part: str, since: float) -> float:
        now = time.perf_counter()
        self.seconds[part] = self.seconds.get(part, 0.0) + now - since
        return now

    def check(self, ok: bool, problem: str) -> None:
        self.checks += 1
        if not ok:
            self.problems.append(problem)


# JavaScript run in each page once it has loaded; each returns plain data for the report.
WAIT_FOR_MATHJAX = "() => (window.MathJax && MathJax.startup && MathJax.startup.promise) ? MathJax.startup.promise.then(() => true) : true"
ALL_IMAGES_EAGER = "() => { for (const image of document.images) image.loading = 'eager'; }"
IMAGES_SETTLED = "() => Array.from(document.images).every((image) => image.complete)"
WIDGET_VIEWS = 'script[type="application/vnd.jupyter.widget-view+json"]'
WIDGETS_DRAWN = f"""() => Array.from(document.querySelectorAll('{WIDGET_VIEWS}')).every((view) => {{
  const area = view.previousElementSibling;
  return area && area.classList.contains('widget-subarea') && area.querySelector('.jupyter-widgets');
}})"""
AUDIT = r"""([verdictPattern, minimumScale]) => {
  const verdict = new RegExp(verdictPattern, 'm');
  const describe = (el) => {
    const name = el.tagName.toLowerCase() + (el.id ? '#' + el.id : '') +
      (typeof el.className === 'string' && el.className.trim() ? '.' + el.className.trim().split(/\s+/).slice(0, 3).join('.') : '');
    const text = (el.textContent || '').trim().replace(/\s+/g, ' ').slice(0, 60);
    return text ? `${name} ("${text}")` : name;
  };
  const article = document.querySelector('main') || document.body;
  const result = {};
  // Equations.
  result.displayTypeset = article.querySelectorAll('mjx-container[display="true"]').length;
  result.mathUntypeset = Array.from(article.querySelectorAll('.math')).filter((el) => !el.querySelector('mjx-container')).map(describe).slice(0, 5);
  const raw = /\\begin|\\frac|\$\$|\\\(|\\\[/;
  const walker = document.createTreeWalker(article, NodeFilter.SHOW_TEXT);
  result.rawTex = [];
  for (let node = walker.nextNode(); node; node = walker.nextNode()) {
    if (!raw.test(node.textContent)) continue;
    const parent = node.parentElement;
    if (parent.closest('pre, code, mjx-container, script, style, textarea, .highlight, .output')) continue;
    if (parent.offsetParent === null && getComputedStyle(parent).position !== 'fixed') continue;  // not rendered
    result.rawTex.push(describe(parent));
  }
  // Images and widgets.
  result.brokenImages = Array.from(document.images).filter((image) => !(image.complete && image.naturalWidth > 0)).map((image) => image.getAttribute('src'));
  result.widgets = document.querySelectorAll('script[type="application/vnd.jupyter.widget-view+json"]').length;
  result.blankWidgets = [];
  document.querySelectorAll('script[type="application/vnd.jupyter.widget-view+json"]').forEach((view, index) => {
    const area = view.previousElementSibling;
    const box = area && area.classList.contains('widget-subarea') ? area.getBoundingClientRect() : null;
    const images = area ? Array.from(area.querySelectorAll('img')) : [];
    if (!box || box.width < 10 || box.height < 10 || images.some((image) => image.naturalWidth === 0)) {
      result.blankWidgets.push(`widget ${index + 1} (${JSON.parse(view.textContent).model_id})`);
    }
  });
  // Width: nothing wider than the viewport unless a scroll container holds it.
  const width = document.documentElement.clientWidth;
  result.pageWidth = [document.documentElement.scrollWidth, width];
  result.overflowing = [];
  for (const el of document.body.querySelectorAll('*')) {
    const box = el.getBoundingClientRect();
    if (box.width === 0 || box.right <= width + 1) continue;
    const style = getComputedStyle(el);
    if (style.visibility === 'hidden' || style.position === 'fixed') continue;
    let ancestor = el, held = false;
    while (ancestor && ancestor !== document.body) {
      const s = getComputedStyle(ancestor);
      // Held by a scroll container; or not drawn: fixed (off-canvas sidebars), hidden, or clipped away (the
      // assistive MathML that screen readers read).
      if (ancestor !== el && (s.overflowX === 'auto' || s.overflowX === 'scroll')) { held = true; break; }
      if (s.position === 'fixed' || s.visibility === 'hidden' || s.display === 'none' || s.clip !== 'auto') { held = true; break; }
      ancestor = ancestor.parentElement;
    }
    if (!held) result.overflowing.push(`${describe(el)} reaches ${Math.round(box.right)} px`);
  }
  result.overflowing = result.overflowing.slice(0, 5);
  // Clipped: content a reader can never see, left of its scroll container's start (no scroll reaches it) or past
  // the edge of a container that hides its overflow (a display equation centred in a box narrower than itself).
  result.clipped = [];
  for (const el of article.querySelectorAll('*')) {
    const box = el.getBoundingClientRect();
    // Skipped: MathJax's assistive MathML (clipped away for screen readers); a slider's origin, an invisible box that
    // noUiSlider moves left of the track (by its full width at the minimum) so that its handle sits at the value.
    if (box.width === 0 || el.closest('mjx-assistive-mml') || el.classList.contains('noUi-origin')) continue;
    const style = getComputedStyle(el);
    if (style.visibility === 'hidden' || style.position === 'fixed') continue;
    let clip = el.parentElement;
    while (clip && clip !== document.body && !['auto', 'scroll', 'hidden', 'clip'].includes(getComputedStyle(clip).overflowX)) {
      clip = clip.parentElement;
    }
    const edge = clip && clip !== document.body ? clip.getBoundingClientRect() : {left: 0, right: Infinity};
    const hides = clip && clip !== document.body && ['hidden', 'clip'].includes(getComputedStyle(clip).overflowX);
    if (box.left < edge.left - 1) result.clipped.push(`${describe(el)} starts ${Math.round(edge.left - box.left)} px left of what can be scrolled to`);
    else if (hides && box.right > edge.right + 1) result.clipped.push(`${describe(el)} ends ${Math.round(box.right - edge.right)} px past a box that hides it`);
  }
  result.clipped = result.clipped.slice(0, 5);
  // Figures (cell outputs and widget pictures): shrunk to the column, their text must stay readable.
  result.shrunkFigures = Array.from(article.querySelectorAll('.cell_output img')).filter((image) =>
    image.naturalWidth >= 100 && image.getBoundingClientRect().width > 0 &&
    image.getBoundingClientRect().width / image.naturalWidth < minimumScale
  ).map((image) => `${image.naturalWidth} px shown at ${Math.round(image.getBoundingClientRect().width)} px`);
  // Verdicts: wrapped, never scrolled.
  result.verdicts = 0;
  result.scrolledVerdicts = [];
  for (const pre of article.querySelectorAll('.cell_output pre')) {
    if (!verdict.test(pre.textContent)) continue;
    result.verdicts += 1;
    if (pre.scrollWidth > pre.clientWidth + 1) result.scrolledVerdicts.push(describe(pre));
  }
  return result;
}"""


# Images: every picture in the article says what it shows (MyST-NB's default alt is the image's file name, and
# Sphinx's `alt` falls back to the URI); the bytes the page and its images weigh.
IMAGES = r"""() => {
  const article = document.querySelector('main') || document.body;
  const fileName = /(^|[\/\\])[\w.-]+\.(png|jpe?g|gif|svg|webp)$|^data:|^(png|jpe?g|svg|image|img|figure|picture|plot|graph)$/i;
  const bad = [];
  for (const image of article.querySelectorAll('img')) {
    const alt = (image.getAttribute('alt') || '').trim();
    const src = image.getAttribute('src') || '';
    if (!alt || fileName.test(alt) || alt === src || alt.length < 8) {
      bad.push(`${src.startsWith('data:') ? 'data: image' : src.slice(0, 60)} has alt ${JSON.stringify(alt)}`);
    }
  }
  const loaded = Array.from(document.images).map((image) => image.currentSrc).filter((src) => src.startsWith(location.origin));
  return {images: article.querySelectorAll('img').length, badAlt: bad.slice(0, 5), badAltCount: bad.length,
          loaded: Array.from(new Set(loaded.map((src) => new URL(src).pathname)))};
}"""

# Live widgets (tutorial_lib/widgets/_live.py): a box of class `tfs-live` holds its controls (ToggleButtons,
# SelectionSlider) and a stack of views; the view shown has a `tfs-state-label` ("d_k = 64 · scaled") and an <img>.
# Marks each widget's controls with `data-tfs-control` (their order is the label's) and returns what is shown.
LIVE_STATE = r"""(index) => {
  const live = document.querySelectorAll('.tfs-live')[index];
  if (!live) return null;
  const shown = (el) => el.checkVisibility ? el.checkVisibility() : el.offsetParent !== null;
  const stack = Array.from(live.children).find((child) => child.querySelector('.tfs-state-label'));
  const controls = Array.from(live.querySelectorAll('.widget-toggle-buttons, .widget-slider'))
    .filter((control) => !(stack && stack.contains(control)));
  const readouts = controls.map((control, k) => {
    control.dataset.tfsControl = String(k);
    const description = (control.querySelector(':scope > .widget-label') || {}).textContent || '';
    if (control.classList.contains('widget-toggle-buttons')) {
      const buttons = Array.from(control.querySelectorAll('.widget-toggle-button'));
      const active = buttons.findIndex((button) => button.classList.contains('mod-active'));
      return {kind: 'toggle', description: description.trim(), readout: active >= 0 ? buttons[active].textContent.trim() : null,
              index: active, count: buttons.length};
    }
    const handle = control.querySelector('.noUi-handle');
    return {kind: 'slider', description: description.trim(),
            readout: ((control.querySelector('.widget-readout') || {}).textContent || '').trim(),
            index: handle ? Math.round(Number(handle.getAttribute('aria-valuenow'))) : null,
            count: handle ? Math.round(Number(handle.getAttribute('aria-valuemax'))) + 1 : 0};
  });
  const labels = Array.from(live.querySelectorAll('.tfs-state-label')).filter(shown);
  const view = labels.length === 1 ? labels[0].parentElement : null;
  const images = view ? Array.from(view.querySelectorAll('img')).filter(shown) : [];
  // A short fingerprint of what is drawn (the pictures are data: URIs of a few tens of kB).
  let hash = 0;
  const src = images.map((image) => image.getAttribute('src')).join('|');
  for (let i = 0; i < src.length; i++) hash = (Math.imul(hash, 31) + src.charCodeAt(i)) | 0;
  return {controls: readouts, labels: labels.map((label) => label.textContent.trim()),
          drawn: images.length ? `${src.length}:${hash}` : null,
          drawnLoaded: images.every((image) => image.complete && image.naturalWidth > 0)};
}"""

# Two runs: every rule but colour contrast on the whole page; then colour contrast, where code blocks are sampled.
# Contrast is axe-core's slowest rule by far (each text element's colours against what is drawn behind it), and the
# syntax-highlighted code is most of a chapter's elements (a span per token: 14,000 of 18,000 in chapter 07). Pygments
# colours a token by its class alone, so one token of each class and colour per page (`data-axe-sample`) checks every
# colour the page's code shows, in its own code block; the rest of the code is left out of that rule only (axe-core
# includes an element when the deepest `include` above it lies inside the deepest `exclude`).
LABEL_CHANGED = r"""([index, label]) => {
  const shown = Array.from(document.querySelectorAll('.tfs-live')[index].querySelectorAll('.tfs-state-label'))
    .filter((element) => element.checkVisibility());
  return shown.length === 1 && shown[0].textContent.trim() !== label;
}"""

AXE_RUN = r"""async ([tags, impacts, contrastToo]) => {
  const seen = new Set();
  for (const token of document.querySelectorAll('.highlight pre span')) {
    const key = `${token.className}|${getComputedStyle(token).color}`;
    if (!seen.has(key) && token.textContent.trim()) { seen.add(key); token.setAttribute('data-axe-sample', ''); }
  }
  // preload: false - axe would fetch each stylesheet's @import again itself and resolve "../basic.css" against the
  // page instead of the stylesheet (a 404 that the page never makes); the rule that reads them (css-orientation-lock)
  // then answers "incomplete", and the book's CSS locks no orientation.
  const options = {resultTypes: ['violations'], preload: false};
  const structure = await axe.run(document, {...options, runOnly: {type: 'tag', values: tags},
                                             rules: {'color-contrast': {enabled: false}}});
  const contrast = !contrastToo ? {violations: []} :
    await axe.run({include: [['body'], ['[data-axe-sample]']], exclude: [['.highlight']]},
                  {...options, runOnly: {type: 'rule', values: ['color-contrast']}});
  return [...structure.violations, ...contrast.violations].filter((rule) => impacts.includes(rule.impact)).map((rule) => ({
    id: rule.id, impact: rule.impact, help: rule.help, count: rule.nodes.length,
    where: rule.nodes.slice(0, 3).map((node) => node.target.join(' ').slice(-120)),
  }));
}"""

# Dark mode: each figure is opaque (a transparent PNG would put black axes on the dark page) or sits on a light
# background that CSS gives it. Reads the corners of each image through a canvas (data: and same-origin images).
FIGURE_BACKGROUNDS = r"""() => {
  const article = document.querySelector('main') || document.body;
  const canvas = document.createElement('canvas');
  canvas.width = canvas.height = 1;
  const context = canvas.getContext('2d', {willReadFrequently: true});
  const opaque = (color) => { const m = color.match(/rgba?\(([^)]+)\)/); if (!m) return false; const p = m[1].split(/[ ,\/]+/).filter(Boolean); return p.length < 4 || Number(p[3]) === 1; };
  const result = {figures: 0, transparent: []};
  for (const image of article.querySelectorAll('img')) {
    const src = image.getAttribute('src') || '';
    if (!image.complete || image.naturalWidth === 0 || /badges\//.test(src) || /\.svg$/i.test(src)) continue;
    result.figures += 1;
    const w = image.naturalWidth, h = image.naturalHeight;
    let clear = false;
    for (const [x, y] of [[0, 0], [w - 1, 0], [0, h - 1], [w - 1, h - 1]]) {
      context.clearRect(0, 0, 1, 1);
      context.drawImage(image, x, y, 1, 1, 0, 0, 1, 1);
      if (context.getImageData(0, 0, 1, 1).data[3] < 255) clear = true;
    }
    if (clear && !opaque(getComputedStyle(image).backgroundColor)) {
      result.transparent.push(`${src.startsWith('data:') ? 'a widget picture' : src.slice(0, 60)} (alt ${JSON.stringify((image.alt || '').slice(0, 50))})`);
    }
  }
  return result;
}"""


def _state_problems(state: dict, where: str) -> list[str]:
    """What is wrong with a live widget's visible state: one view shown, drawn, and labelled with each control's
    current option ("description = option", in the controls' order, joined by " · ")."""
    if len(state["labels"]) != 1:
        return [f"{where}: {len(state['labels'])} views shown at once (one expected): {state['labels']}"]
    problems = []
    if state["drawn"] is None or not state["drawnLoaded"]:
        problems.append(f"{where}: the view {state['labels'][0]!r} shows no loaded picture")
    segments = state["labels"][0].split(" · ")
    if len(segments) != len(state["controls"]):
        return problems + [f"{where}: the label {state['labels'][0]!r} names {len(segments)} controls, the widget has "
                           f"{len(state['controls'])}"]
    for control, segment in zip(state["controls"], segments):
        readout = control["readout"]
        expected = f"{control['description']} = {readout}" if control["description"] else readout
        if not readout or segment.strip() != expected:
            problems.append(f"{where}: the label says {segment.strip()!r}, the {control['kind']} reads {expected!r}")
    return problems


async def _drive_widgets(page, report: PageReport, viewport_width: int) -> None:
    """Move every control of every live widget through its states (a toggle: each of its buttons, clicked; a slider:
    arrow keys on its focused handle, as a keyboard or a phone reader does), and check after each move that the
    picture changed and the label names the controls' new values."""
    count = await page.locator(".tfs-live").count()
    report.widgets += count
    for index in range(count):
        live = page.locator(".tfs-live").nth(index)
        state = await page.evaluate(LIVE_STATE, index)
        name = f"live widget {index + 1}"
        for problem in _state_problems(state, f"{name} as stored"):
            report.check(False, problem)
        report.check(bool(state["controls"]), f"{name} has no control (ToggleButtons or SelectionSlider)")
        seen = {state["labels"][0] if state["labels"] else ""}
        for k, control in enumerate(state["controls"]):
            element = live.locator(f'[data-tfs-control="{k}"]')
            if control["kind"] == "toggle":
                moves = [i for i in range(control["count"]) if i != control["index"]]
            else:
                # Toward the side with more stops first; back the other way when that end is reached, up to every
                # stop twice, until the widget has shown enough different states.
                moves = [None] * (2 * (control["count"] - 1))
                direction = "ArrowLeft" if control["index"] >= control["count"] / 2 else "ArrowRight"
            for number, move in enumerate(moves):
                if move is None and number > 0 and len(seen) >= MINIMUM_WIDGET_STATES:
                    break
                before = state
                where = f"{name}, {control['kind']} {control['description'] or k + 1!r}"
                try:
                    if control["kind"] == "toggle":
                        await element.locator(".widget-toggle-button").nth(move).click(timeout=5_000)
                    else:
                        handle = element.locator(".noUi-handle")
                        await handle.scroll_into_view_if_needed(timeout=5_000)
                        box = await handle.bounding_box()
                        report.check(box is not None and box["x"] >= 0 and box["x"] + box["width"] <= viewport_width,
                                     f"{where}: the slider's handle is outside the {viewport_width} px screen ({box})")
                        current = (await page.evaluate(LIVE_STATE, index))["controls"][k]["index"]
                        if direction == "ArrowRight" and current >= control["count"] - 1:
                            direction = "ArrowLeft"
                        elif direction == "ArrowLeft" and current <= 0:
                            direction = "ArrowRight"
                        await handle.focus()
                        await page.keyboard.press(direction)
                    await page.wait_for_function(
                        LABEL_CHANGED, arg=[index, before["labels"][0] if before["labels"] else ""], timeout=5_000)
                except Exception as error:  # noqa: BLE001 - a control that switches no view: this page's failure
                    report.check(False, f"{where}: moving it did not change the view shown ({type(error).__name__}: "
                                        f"{str(error).splitlines()[0][:120]})")
                    break
                state = await page.evaluate(LIVE_STATE, index)
                for problem in _state_problems(state, where):
                    report.check(False, problem)
                report.check(state["drawn"] != before["drawn"],
                             f"{where}: the picture did not change from {before['labels']} to {state['labels']}")
                report.check(state["controls"][k]["index"] != before["controls"][k]["index"],
                             f"{where}: the control's value did not move")
                seen.add(state["labels"][0] if state["labels"] else "")
        report.check(len(seen) >= MINIMUM_WIDGET_STATES,
                     f"{name} was driven through {len(seen)} states (fewer than {MINIMUM_WIDGET_STATES}): {sorted(seen)}")
        report.states += len(seen)


FOLDS = """() => Array.from(document.querySelectorAll('.cell.tag_hide-input')).map((cell) => {
  const details = cell.querySelector('details.hide');
  const summary = details && details.querySelector('summary');
  const code = cell.querySelector('.cell_input');
  return {open: details ? details.open : null, prompt: summary ? summary.innerText.trim() : '',
          name: summary ? (summary.getAttribute('aria-label') || '') : '',
          codeShown: code ? code.checkVisibility() : false};  // false inside a closed <details>, whatever its box
})"""


async def _folds(page, report: PageReport, page_name: str) -> None:
    """Each cell that holds an exercise's answer is folded: closed, its code not shown, the line on the fold naming
    the exercise (and no other name for a screen reader); one click shows the code."""
    expected = _folded_prompts(page_name)
    folds = await page.evaluate(FOLDS)
    report.check([fold["prompt"] for fold in folds] == expected,
                 f"folded cells show {[fold['prompt'][:40] for fold in folds]}, the notebook folds {len(expected)}")
    for fold in folds:
        report.check(fold["open"] is False and not fold["codeShown"] and not fold["name"],
                     f"a fold is open, shows its code or hides its line from a screen reader: {fold}")
    if folds:
        summary = page.locator(".cell.tag_hide-input details.hide > summary").first
        await summary.click()
        shown = await page.locator(".cell.tag_hide-input .cell_input").first.evaluate("(code) => code.checkVisibility()")
        report.check(shown, "clicking a fold's line does not show its code")
        await summary.click()


async def _accessibility(page, report: PageReport, contrast: bool) -> None:
    """axe-core (the pinned npm package, injected from .book-assets/) on the page: no serious or critical violation
    of WCAG 2.x A/AA. Every rule runs on the whole page; colour contrast only where ``contrast`` (see AXE_CONTRAST)."""
    await page.add_script_tag(path=str(AXE))
    violations = await page.evaluate(AXE_RUN, [AXE_TAGS, list(AXE_FAILING_IMPACTS), contrast])
    for rule in violations:
        report.axe[rule["id"]] = report.axe.get(rule["id"], 0) + rule["count"]
    report.check(not violations, "axe-core (WCAG A/AA): " + "; ".join(
        f"{rule['id']} ({rule['impact']}, {rule['count']} elements: {rule['help']}) at {rule['where']}"
        for rule in violations))


async def _images_and_size(page, report: PageReport, page_name: str) -> None:
    images = await page.evaluate(IMAGES)
    report.check(not images["badAlt"],
                 f"{images['badAltCount']} image(s) without an alt text that says what they show: {images['badAlt']}")
    size = (HTML / f"{page_name}.html").stat().st_size
    for path in images["loaded"]:
        local = HTML / urllib.parse.unquote(path).lstrip("/")
        size += local.stat().st_size if local.is_file() else 0
    report.check(size < MAXIMUM_PAGE_BYTES, f"the page and its images weigh {size / 1e6:.2f} MB "
                                             f"(at most {MAXIMUM_PAGE_BYTES / 1e6:.0f} MB)")


async def _phone_navigation(page, report: PageReport, base: str) -> None:
    """At 390 px: each sidebar opens from the button a reader sees, and a link in it works."""
    secondary = page.locator(".secondary-toggle:visible")
    if await secondary.count() and await page.locator("#pst-secondary-sidebar nav a[href^='#']").count():
        await secondary.first.click()
        dialog = page.locator("#pst-secondary-sidebar-modal[open]")
        try:
            await dialog.wait_for(state="visible", timeout=5_000)
            opened = True
        except Exception:  # noqa: BLE001 - Playwright's TimeoutError: reported, not raised
            opened = False
        report.check(opened, "the page's contents do not open from the visible button")
        if opened:
            links = dialog.locator("a[href^='#']:visible")
            link = links.nth(await links.count() // 2)
            target = (await link.get_attribute("href"))[1:]
            await link.click()
            landed = await page.evaluate(
                """async (id) => {
                  const el = document.getElementById(decodeURIComponent(id));
                  if (!el) return null;
                  let top = NaN;  // wait for a smooth scroll to come to rest
                  for (let i = 0; i < 30 && top !== el.getBoundingClientRect().top; i++) {
                    top = el.getBoundingClientRect().top;
                    await new Promise((resolve) => setTimeout(resolve, 100));
                  }
                  return [location.hash, top, innerHeight];
                }""",
                target,
            )
            report.check(
                landed is not None and landed[0] == f"#{target}" and -5 <= landed[1] < landed[2],
                f"the page's contents link to #{target} does not bring the section into view ({landed})",
            )
            still_open = await page.locator("dialog[open]").count()
            report.check(not still_open, f"the page's contents stay open over the page after following #{target}")
            if still_open:
                await page.keyboard.press("Escape")
    primary = page.locator(".primary-toggle:visible")
    report.check(await primary.count() > 0, "no visible button opens the table of contents")
    if await primary.count():
        await primary.first.click()
        dialog = page.locator("#pst-primary-sidebar-modal[open]")
        try:
            await dialog.wait_for(state="visible", timeout=5_000)
            opened = True
        except Exception:  # noqa: BLE001
            opened = False
        report.check(opened, "the table of contents does not open from the visible button")
        if opened:
            here = page.url.split("#")[0]
            links = dialog.locator("nav a.reference.internal:visible")
            hrefs = [await links.nth(i).evaluate("(a) => a.href") for i in range(await links.count())]
            others = [i for i, href in enumerate(hrefs) if href.split("#")[0] != here]
            report.check(bool(others), "the table of contents shows no link to another page")
            if others:
                index = others[len(others) // 2]
                await links.nth(index).click()
                try:
                    await page.wait_for_url(hrefs[index], timeout=30_000)  # 10 s was too short on one shared slow core
                    arrived = True
                except Exception:  # noqa: BLE001
                    arrived = False
                report.check(arrived, f"the table of contents link to {hrefs[index].removeprefix(base)} does not open it")


async def _audit_page(browser, base: str, page_name: str, width_name: str, blocked: list[str],
                      screenshots: Path | None, dark: bool = False) -> PageReport:
    """Every check of the module's docstring on one page at one width; ``dark``: with the theme in dark mode (as a
    reader who chose it left it in the browser's storage), where figures must also be opaque."""
    report = PageReport(page_name, "dark" if dark else width_name)
    context = await browser.new_context(viewport={"width": WIDTHS[width_name], "height": HEIGHT[width_name]})
    if dark:  # pydata-sphinx-theme reads the reader's choice from localStorage before it draws the page
        await context.add_init_script("localStorage.setItem('mode', 'dark'); localStorage.setItem('theme', 'dark');")
    off_origin: list[str] = []
    failed: list[str] = []
    errors: list[str] = []

    async def route(route) -> None:
        if route.request.url.startswith(base):
            await route.continue_()
        else:
            off_origin.append(route.request.url)
            blocked.append(route.request.url)
            await route.abort()

    await context.route("**/*", route)
    page = await context.new_page()
    page.on("console", lambda message: errors.append(f"console error: {message.text}") if message.type == "error" else None)
    page.on("pageerror", lambda error: errors.append(f"page error: {error}"))
    page.on("response", lambda response: failed.append(f"{response.status} {response.url.removeprefix(base)}") if response.status >= 400 else None)
    clock = time.perf_counter()
    try:
        await page.goto(f"{base}{page_name}.html", wait_until="load", timeout=30_000)
        await page.evaluate(WAIT_FOR_MATHJAX)
        await page.evaluate(ALL_IMAGES_EAGER)
        for condition in (IMAGES_SETTLED, WIDGETS_DRAWN):
            try:
                await page.wait_for_function(condition, timeout=15_000)
            except Exception:  # noqa: BLE001 - what is missing is reported by the audit below
                pass
        audit = await page.evaluate(AUDIT, [VERDICT, MINIMUM_FIGURE_SCALE])
        expected = display_equations(_markdown_of(page_name))
        report.check(audit["displayTypeset"] == expected,
                     f"{audit['displayTypeset']} display equations typeset, the source has {expected}")
        report.check(not audit["mathUntypeset"], f"math left untypeset: {audit['mathUntypeset']}")
        report.check(not audit["rawTex"], f"raw TeX visible in {audit['rawTex'][:5]}")
        report.check(not audit["brokenImages"], f"images not loaded: {audit['brokenImages']}")
        report.check(not audit["blankWidgets"], f"widget outputs not drawn: {audit['blankWidgets']}")
        scroll_width, width = audit["pageWidth"]
        report.check(scroll_width <= width, f"the page is {scroll_width} px wide in a {width} px viewport")
        report.check(not audit["overflowing"], f"wider than the viewport, outside a scroll container: {audit['overflowing']}")
        report.check(not audit["clipped"], f"cut off where no scrolling reaches: {audit['clipped']}")
        report.check(not audit["scrolledVerdicts"], f"check verdicts scroll instead of wrapping: {audit['scrolledVerdicts']}")
        report.check(not audit["shrunkFigures"], f"figures shrunk below {MINIMUM_FIGURE_SCALE:.0%} (their text unreadable): {audit['shrunkFigures']}")
        if screenshots is not None and page_name == SCREENSHOT_PAGE and not dark:
            screenshots.mkdir(parents=True, exist_ok=True)
            await page.evaluate("(selector) => { document.querySelector(selector).scrollIntoView(); window.scrollBy(0, -64); }",
                                SCREENSHOT_TARGETS[width_name])
            await page.wait_for_timeout(300)
            await page.screenshot(path=str(screenshots / f"chapter-03-{width_name}.png"))
            await page.evaluate("window.scrollTo(0, 0)")
        if dark:
            theme = await page.evaluate("document.documentElement.dataset.theme")
            report.check(theme == "dark", f"the theme is in {theme!r} mode, not dark")
            backgrounds = await page.evaluate(FIGURE_BACKGROUNDS)
            report.check(backgrounds["figures"] > 0, "no figure to check in dark mode")
            report.check(not backgrounds["transparent"],
                         f"figures transparent on the dark page (no background of their own): {backgrounds['transparent'][:5]}")
        await _folds(page, report, page_name)
        clock = report.timed("load and layout", clock)
        if width_name == "desktop" or page_name in AXE_PHONE_PAGES:
            await _accessibility(page, report, contrast=width_name in AXE_CONTRAST or page_name == DARK_PAGE)
            clock = report.timed("axe-core", clock)
        await _images_and_size(page, report, page_name)
        clock = report.timed("alt text and size", clock)
        await _drive_widgets(page, report, WIDTHS[width_name])
        clock = report.timed("widgets", clock)
        if width_name == "phone" and page_name in PHONE_NAVIGATION_PAGES:
            await _phone_navigation(page, report, base)
            report.timed("phone navigation", clock)
    except Exception as error:  # noqa: BLE001 - a page that cannot be audited is a failure of that page
        report.check(False, f"could not audit the page: {type(error).__name__}: {error}")
    finally:
        await context.close()
    report.check(not off_origin, f"requests to other origins: {sorted(set(off_origin))[:5]}")
    report.check(not failed, f"failed requests: {failed[:5]}")
    report.check(not errors, f"{errors[:5]}")
    return report


async def _search(browser, base: str) -> PageReport:
    """The search box finds "softmax", and its results lead to chapter 03."""
    report = PageReport("search", "desktop")
    context = await browser.new_context(viewport={"width": WIDTHS["desktop"], "height": HEIGHT["desktop"]})
    await context.route("**/*", lambda route: route.continue_() if route.request.url.startswith(base) else route.abort())
    page = await context.new_page()
    try:
        await page.goto(f"{base}intro.html", wait_until="load")
        await page.locator(".search-button__button:visible").first.click()
        field_ = page.locator("#pst-search-dialog input[name='q']")
        await field_.fill("softmax")
        await field_.press("Enter")
        await page.wait_for_url(re.compile(r"search\.html\?q=softmax"), timeout=10_000)
        results = page.locator("#search-results ul.search li a")
        await results.first.wait_for(timeout=15_000)
        hrefs = [await results.nth(i).evaluate("(a) => a.href") for i in range(await results.count())]
        chapter = [i for i, href in enumerate(hrefs) if f"{SCREENSHOT_PAGE}.html" in href]
        report.check(bool(chapter), f"searching 'softmax' does not list chapter 03 (results: {[h.removeprefix(base) for h in hrefs]})")
        if chapter:
            await results.nth(chapter[0]).click()
            await page.wait_for_url(re.compile(re.escape(f"{SCREENSHOT_PAGE}.html")), timeout=10_000)
            title = await page.locator("main h1").first.text_content()
            report.check("Scaled dot-product attention" in (title or ""), f"the search result opened a page titled {title!r}")
    except Exception as error:  # noqa: BLE001
        report.check(False, f"the search failed: {type(error).__name__}: {error}")
    finally:
        await context.close()
    return report


def chromium() -> str:
    """Debian's Chromium (Playwright's own browser download cannot run here); ``BOOK_CHROMIUM`` overrides."""
    found = os.environ.get("BOOK_CHROMIUM") or shutil.which("chromium")
    if not found:
        pytest.fail("Chromium is not installed: `apt-get install chromium` (.ci/run does it), or set BOOK_CHROMIUM")
    return found


async def _audit_book(pages: list[str], base: str, screenshots: Path | None) -> tuple[list[PageReport], PageReport, list[str]]:
    from playwright.async_api import async_playwright

    blocked: list[str] = []
    async with async_playwright() as playwright:
        browser = await playwright.chromium.launch(executable_path=chromium())
        limit = asyncio.Semaphore(PARALLEL_PAGES)

        async def one(page_name: str, width_name: str) -> PageReport:
            async with limit:
                return await _audit_page(browser, base, page_name, width_name, blocked, screenshots)

        async def dark() -> list[PageReport]:
            if DARK_PAGE not in pages:
                return []
            async with limit:
                return [await _audit_page(browser, base, DARK_PAGE, "desktop", blocked, None, dark=True)]

        reports, dark_reports = await asyncio.gather(
            asyncio.gather(*(one(p, w) for p in pages for w in WIDTHS)), dark())
        reports = list(reports) + dark_reports
        search = await _search(browser, base)
        await browser.close()
    return list(reports), search, blocked


@pytest.fixture(scope="module")
def book(request):
    """Serve _build/html on 127.0.0.1, audit every page at both widths, and report the totals."""
    if not (HTML / "index.html").exists():
        pytest.fail("the book is not built: run `make book` first (make test builds it before this suite)")
    if not AXE.is_file():
        pytest.fail(f"{AXE} is missing: run `python tools/book_assets.py` (`make book` does)")
    pages = [page for page in toc_pages() if not os.environ.get("BOOK_PAGES") or page in os.environ["BOOK_PAGES"].split(",")]
    missing = [page for page in pages if not (HTML / f"{page}.html").exists()]
    if missing:
        pytest.fail(f"_build/html lacks {missing}: rebuild the book (`make book`)")
    handler = functools.partial(_QuietHandler, directory=str(HTML))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    screenshots = Path(os.environ["BOOK_SCREENSHOTS"]) if os.environ.get("BOOK_SCREENSHOTS") else None
    start = time.perf_counter()
    try:
        reports, search, blocked = asyncio.run(_audit_book(pages, f"http://127.0.0.1:{server.server_address[1]}/", screenshots))
    finally:
        server.shutdown()
    seconds = time.perf_counter() - start
    checks = sum(report.checks for report in reports) + search.checks
    failed = sum(bool(report.problems) for report in reports) + bool(search.problems)
    axe: dict[str, int] = {}
    for report in reports:
        for rule, count in report.axe.items():
            axe[rule] = axe.get(rule, 0) + count
    dark = any(report.width == "dark" for report in reports)
    summary = (
        f"browser: {len(pages)} pages x {len(WIDTHS)} widths ({', '.join(f'{w} px' for w in WIDTHS.values())})"
        f"{' + ' + DARK_PAGE.split('/')[-1] + ' in dark mode' if dark else ''} + search: "
        f"{sum(r.widgets for r in reports)} live widgets driven through {sum(r.states for r in reports)} states, "
        f"{checks} checks in {seconds:.1f} s, {failed} page(s) with problems, "
        f"axe-core serious/critical: {sum(axe.values())} ({', '.join(f'{k} {v}' for k, v in sorted(axe.items())) or 'none'}), "
        f"{len(blocked)} off-origin request(s) blocked; page-seconds spent (the pages run {PARALLEL_PAGES} at a time): "
        + ", ".join(f"{part} {sum(r.seconds.get(part, 0.0) for r in reports):.0f} s"
                    for part in dict.fromkeys(part for r in reports for part in r.seconds))
    )
    terminal = request.config.pluginmanager.get_plugin("terminalreporter")
    capture = request.config.pluginmanager.get_plugin("capturemanager")

    def write_summary() -> None:
        if terminal is not None and capture is not None:
            with capture.global_and_fixture_disabled():
                terminal.write_line("\n" + summary)

    write_summary()  # when the audit ends, and again after the module's last test (the end of `make test-browser`)
    request.addfinalizer(write_summary)
    return {(report.page, report.width): report for report in reports} | {("search", "desktop"): search}


@pytest.mark.browser
@pytest.mark.parametrize("width", list(WIDTHS))
@pytest.mark.parametrize("page", toc_pages())
def test_page_in_the_browser(book, page, width):
    if (page, width) not in book:
        pytest.skip("not in BOOK_PAGES")
    report = book[(page, width)]
    if report.problems:
        pytest.fail(f"{page}.html at {WIDTHS[width]} px:\n  " + "\n  ".join(report.problems), pytrace=False)


@pytest.mark.browser
def test_chapter_03_in_dark_mode(book):
    """Chapter 03 with the theme in dark mode: every check above, figures opaque, axe-core's contrast in dark colours."""
    if (DARK_PAGE, "dark") not in book:
        pytest.skip("not in BOOK_PAGES")
    report = book[(DARK_PAGE, "dark")]
    if report.problems:
        pytest.fail(f"{DARK_PAGE}.html in dark mode:\n  " + "\n  ".join(report.problems), pytrace=False)


@pytest.mark.browser
def test_search_finds_softmax_in_chapter_03(book):
    report = book[("search", "desktop")]
    if report.problems:
        pytest.fail("\n".join(report.problems), pytrace=False)


# --- the helpers themselves (these run without a browser, in every `pytest tests`) ------------------------------------


@pytest.mark.parametrize(
    ("markdown", "count"),
    [
        ("$$a$$ and $x$", 1),
        ("(eq-x)=\n$$\na = b \\tag{1}\n$$\n\ntext\n\n$$\nc\n$$", 2),
        ("\\begin{align*}\na &= b \\\\ c &= d \\tag{3}\n\\end{align*}", 1),
        ("$$\n\\begin{aligned} a \\end{aligned}\n$$", 1),
        ("```python\nx = '$$'\n```\nand `$$` in code", 0),
        ("```{math}\na\n```", 1),
    ],
)
def test_display_equations_are_counted_from_the_source(markdown, count):
    assert display_equations(markdown) == count


def test_the_phone_navigation_pages_are_pages_of_the_book():
    assert set(PHONE_NAVIGATION_PAGES) <= set(toc_pages())


def test_every_page_of_the_toc_is_audited():
    pages = toc_pages()
    assert pages[0] == "intro" and "chapters/03_scaled_dot_product_attention" in pages
    assert any(page.startswith("solutions/") for page in pages)


@pytest.mark.browser
def test_every_build_cell_link_of_the_paper_page_lands_on_its_cell():
    """The traceability page's "build cell" links point at ids that tools/book_extension.py puts on build cells."""
    page = (HTML / "traceability.html").read_text(encoding="utf-8")
    links = re.findall(r'<a class="reference internal" href="([^"#]+)#([^"]+)"[^>]*>(?:<span[^>]*>)?build cell', page)
    assert links, "the page shows no build-cell link"
    missing = []
    for target, anchor in links:
        html = (HTML / target).read_text(encoding="utf-8")
        at = html.find(f'id="{anchor}"')
        # The id sits on the cell's container (or on an anchor at its start when the cell shows several symbols).
        cell_start = html.rfind('<div class="cell ', 0, at + 1) if at >= 0 else -1  # "cell tag_hide-input …" when folded
        if at < 0 or "tutorial_lib/" not in html[cell_start : cell_start + 3000]:
            missing.append(f"{target}#{anchor}")
    assert missing == []
