"""The book's Sphinx extension (``_config.yml``: ``sphinx.local_extensions``): the rendered book works offline and on a phone.

- **Offline.** MathJax 3, RequireJS and the widget manager are served from ``_build/html/_vendor/`` (installed by
  ``tools/book_assets.py`` from npm at pinned versions) instead of CDNs; the Colab badges are the book's own SVGs
  (``tools/book_static/badges/``) instead of images fetched from Google and shields.io. Every page is then checked:
  a script, stylesheet or image that another origin would serve is a build error, so no page can regress to one.
- **One script each.** sphinx-thebe registers its inline configuration twice (``const THEBE_JS_URL`` declared twice
  is an error in every page's console); duplicates of a script are dropped.
- **On a phone.** ``book.js`` wires the visible sidebar buttons that the theme leaves dead; ``book.css`` lets display
  equations scroll inside their box, wraps check verdicts instead of scrolling them, and keeps widgets in the width.
- **Named controls.** ``book.js`` names each widget slider and group of toggle buttons after its description (the
  widget manager leaves them nameless for a screen reader) and has a slider say the option its readout shows.
- **Figures that say what they show.** A figure of the package stores its text alternative (its title and axes, see
  ``tutorial_lib.widgets._plotting.figure_alt``) in the output's metadata; MyST-NB reads only width and height from
  there, so the image renderer is wrapped to carry ``alt`` into the page's ``<img>`` too.
- **Anchors for the traceability page.** Each build cell of a chapter gets a label per symbol it shows,
  ``cell-NN-module.name`` in lower case (e.g. ``cell-03-attention.scaled_dot_product_attention``), so
  ``[…](#cell-03-…)`` links to the cell and a missing one fails the build (``-n``); ``tools/book_pages.py`` writes
  such links into ``traceability.md``.
"""

from __future__ import annotations

import filecmp
import re
import shutil
from pathlib import Path
from typing import Any

from docutils import nodes
from sphinx.application import Sphinx
from sphinx.errors import ExtensionError
from sphinx.util import logging
from sphinx.util.osutil import relative_uri

import book_assets
import notebook_header

logger = logging.getLogger(__name__)
HERE = Path(__file__).resolve().parent
STATIC = HERE / "book_static"

# A check's verdict (tutorial_lib/checks/core.py): "03.attention: correct (2/2 points). It matches ..."
VERDICT = re.compile(r"^\d\d\.\w+: .*?\(\d+/\d+ points?\)", re.MULTILINE)
# The first line of a build cell: "# tutorial_lib/attention.py · causal_mask, padding_mask"
BUILD_MARKER = re.compile(r"# tutorial_lib/(?P<module>[\w/]+)\.py · (?P<names>.+)")

# Remote images the notebooks show (in Jupyter and on Colab they load from the web) -> the book's own copies.
BADGES = {
    notebook_header.COLAB_BADGE: "_static/badges/open-in-colab.svg",
    notebook_header.EXERCISES_BADGE: "_static/badges/exercises-open-in-colab.svg",
}
# Scripts that Sphinx and MyST-NB load from CDNs -> the copies installed by tools/book_assets.py.
CDN_SCRIPTS = {
    "mathjax": book_assets.MATHJAX,
    "require.js": book_assets.REQUIREJS,
    "require.min.js": book_assets.REQUIREJS,
    "@jupyter-widgets/html-manager": book_assets.WIDGETS,
}


def build_cell_labels(docname: str, source: str) -> list[tuple[str, str]]:
    """``(label, html id)`` for each symbol a chapter's build cell shows (none for other cells and other pages)."""
    match = BUILD_MARKER.fullmatch(source.split("\n", 1)[0].strip())
    chapter = re.fullmatch(r"chapters/(\d\d)_\w+", docname)
    if match is None or chapter is None:
        return []
    module = match["module"].replace("/", ".")
    labels = []
    for name in match["names"].split(","):
        label = f"cell-{chapter[1]}-{module}.{name.strip()}".lower()  # Sphinx looks labels up in lower case
        labels.append((label, nodes.make_id(label)))
    return labels


def _on_config_inited(app: Sphinx, config: Any) -> None:
    if not book_assets.up_to_date():
        raise ExtensionError(
            "the book's JavaScript (MathJax, RequireJS, the widget manager) is missing or outdated in .book-assets/: "
            "run `make book` or `python tools/book_assets.py`"
        )
    config.html_static_path.append(str(STATIC))
    # pydata-sphinx-theme logs "Got invalid theme mode" on every page when no default is set (html_context's).
    config.html_context.setdefault("default_mode", "light")


def _copy_assets(app: Sphinx) -> None:
    """Copy .book-assets/ into _build/html/_vendor/ (only what changed), before any page refers to it; what only the
    browser suite uses (axe-core) stays out of the book."""
    if app.builder.format != "html":
        return
    target = Path(app.outdir) / "_vendor"
    stamp = book_assets.ASSETS / book_assets.STAMP.name
    if (target / stamp.name).exists() and filecmp.cmp(stamp, target / stamp.name, shallow=False):
        return
    shutil.rmtree(target, ignore_errors=True)
    shutil.copytree(book_assets.ASSETS, target, ignore=lambda folder, names: [
        name for name in names if Path(folder) == book_assets.ASSETS and name in book_assets.TEST_ONLY])


def _on_doctree_read(app: Sphinx, doctree: nodes.document) -> None:
    docname = app.env.docname
    std = app.env.get_domain("std")
    for cell in doctree.findall(nodes.container):
        if cell.get("nb_element") != "cell_code":
            continue
        # Wrap verdicts: a stream output holding a check's verdict gets the class ``verdict`` (book.css).
        for output in cell.findall(nodes.literal_block):
            if "stream" in output.get("classes", []) and VERDICT.search(output.astext()):
                output["classes"].append("verdict")
        inputs = [node for node in cell.findall(nodes.container) if node.get("nb_element") == "cell_code_source"]
        source = inputs[0].astext() if inputs else ""
        for label, html_id in build_cell_labels(docname, source):
            if label in std.anonlabels:  # the same symbol shown twice on one page: the first cell is its home
                continue
            cell["ids"].append(html_id)
            std.anonlabels[label] = (docname, html_id)
            std.labels[label] = (docname, html_id, f"the build cell of {label.split('-', 2)[2]}")


def _on_doctree_resolved(app: Sphinx, doctree: nodes.document, docname: str) -> None:
    """Serve the badges from the book; any other image from another origin is an error."""
    page = app.builder.get_target_uri(docname)
    for image in doctree.findall(nodes.image):
        uri = image["uri"]
        if uri in BADGES:
            image["uri"] = relative_uri(page, BADGES[uri])
        elif "://" in uri:
            logger.warning(f"{docname}: the image {uri} would be fetched from another origin by every reader "
                           "(the book must work offline): serve a copy from the book", location=image)


def _local_script(filename: str) -> str | None:
    return next((local for key, local in CDN_SCRIPTS.items() if key in filename), None)


def _on_html_page_context(app: Sphinx, pagename: str, templatename: str, context: dict, doctree: Any) -> None:
    """Swap the CDN scripts for the book's copies, drop duplicated scripts, and refuse any other remote asset."""
    scripts = context.get("script_files")
    if scripts is None:
        return
    kept, seen = [], set()
    for script in scripts:
        filename = str(script.filename or "")
        attributes = dict(script.attributes)
        if "://" in filename and (local := _local_script(filename)):
            filename = local
            for key in ("integrity", "crossorigin"):
                attributes.pop(key, None)
            if "data-jupyter-widgets-cdn" in attributes:
                attributes["data-jupyter-widgets-cdn"] = context["pathto"](book_assets.WIDGETS_CDN, 1)
        key = (filename, tuple(sorted(attributes.items())))
        if key in seen:
            continue
        seen.add(key)
        if filename == book_assets.REQUIREJS:
            # RequireJS resolves the widget manager's modules, and so the icon fonts it loads, from its baseUrl:
            # the book's _vendor/ folder, where they lie in npm's layout (by default it would be the page's folder).
            vendor = context["pathto"](book_assets.WIDGETS_CDN, 1)
            kept.append(type(script)("", priority=script.priority, body=f"var require = {{baseUrl: {vendor!r}}};"))
        kept.append(type(script)(filename, priority=script.priority, **attributes))
    remote = [js.filename for js in kept if "://" in str(js.filename)]
    remote += [css.filename for css in context.get("css_files", []) if "://" in str(css.filename)]
    if remote:
        raise ExtensionError(f"{pagename}: the page would load {remote} from another origin (the book must work offline)")
    scripts[:] = kept


def _render_image_with_alt(render_image):
    """MyST-NB's image renderer, also taking ``alt`` from the output's metadata (``{"image/png": {"alt": ...}}``)."""

    def render(self, data):
        image_nodes = render_image(self, data)
        alt = data.output_metadata.get(data.mime_type, {}).get("alt")
        for node in image_nodes:
            if isinstance(alt, str) and alt.strip() and "alt" not in node:
                node["alt"] = alt
        return image_nodes

    render.wrapped = render_image
    return render


def setup(app: Sphinx) -> dict[str, Any]:
    from myst_nb.core.render import NbElementRenderer

    if not hasattr(NbElementRenderer.render_image, "wrapped"):
        NbElementRenderer.render_image = _render_image_with_alt(NbElementRenderer.render_image)
    app.connect("config-inited", _on_config_inited)
    app.connect("builder-inited", _copy_assets)
    app.connect("doctree-read", _on_doctree_read)
    app.connect("doctree-resolved", _on_doctree_resolved)
    app.connect("html-page-context", _on_html_page_context, priority=900)  # after MathJax's and MyST-NB's scripts
    app.add_js_file("book.js", loading_method="defer", priority=900)  # after MathJax (500): book.js completes it
    app.add_css_file("book.css")
    return {"version": "1.0", "parallel_read_safe": True, "parallel_write_safe": True}
