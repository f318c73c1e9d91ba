// The book's fixes to the theme (tools/book_extension.py adds this file to every page).
//
// Phone navigation: pydata-sphinx-theme and sphinx-book-theme attach their handlers to the *first* element with the
// class `primary-toggle` (the table of contents) or `secondary-toggle` (the page's contents). That is the theme
// navbar's button, which sphinx-book-theme hides; the buttons a reader sees, in the article's header, have no handler,
// so on a phone the two sidebars cannot be opened. Each visible button forwards its click to the wired one, which
// opens the sidebar as a dialog on a narrow screen and collapses it on a wide one, as the themes intend.
//
// In the dialog, a link to a section of the same page scrolled the page behind the dialog and left the dialog open
// over it: a link followed from either sidebar closes the dialog (the theme then puts the sidebar back in place).
document.addEventListener("DOMContentLoaded", () => {
  for (const kind of ["primary", "secondary"]) {
    const [wired, ...unwired] = document.querySelectorAll(`.${kind}-toggle`);
    for (const button of unwired) {
      button.addEventListener("click", (event) => {
        event.preventDefault();
        event.stopPropagation();
        wired.click();
      });
    }
    const dialog = document.getElementById(`pst-${kind}-sidebar-modal`);
    if (dialog) {
      dialog.addEventListener("click", (event) => {
        if (dialog.open && event.target.closest("a[href]")) dialog.close();
      });
    }
  }
});

// Widgets typeset their labels with MathJax 2's API, `MathJax.Hub.Queue(["Typeset", MathJax.Hub, element])`, which
// MathJax 3 does not have: every widget on a page with equations threw "Cannot read properties of undefined (reading
// 'Queue')". This script runs after MathJax 3 has set itself up (both are deferred, MathJax first) and before the
// widgets are drawn; the bridge typesets the element with MathJax 3 once its start-up is done.
if (window.MathJax && window.MathJax.version && !window.MathJax.Hub) {
  window.MathJax.Hub = {
    Queue(...calls) {
      for (const call of calls) {
        const element = Array.isArray(call) ? call[2] : undefined;
        if (element instanceof Element) {
          window.MathJax.startup.promise.then(() => window.MathJax.typesetPromise([element]));
        }
      }
    },
  };
}

// Inline formulas cannot break across lines (MathJax 3), so one wider than its paragraph (on a phone, a few) pushed
// the page wider than the screen. Those get the class `book-wide-math` (book.css: they scroll in their own box),
// checked again whenever the width changes.
function markWideInlineMath() {
  for (const math of document.querySelectorAll('mjx-container:not([display="true"])')) {
    const block = math.parentElement.closest("p, li, dd, td, th, div");
    const natural = math.firstElementChild ? math.firstElementChild.getBoundingClientRect().width : 0;
    math.classList.toggle("book-wide-math", block !== null && natural > block.clientWidth);
  }
}
if (window.MathJax && window.MathJax.startup && window.MathJax.startup.promise) {
  window.MathJax.startup.promise.then(markWideInlineMath);
  window.addEventListener("resize", markWideInlineMath);
}

// Widget controls need an accessible name. The widget manager draws a slider's description as a <label> tied to
// nothing and its handle as a bare `role="slider"` element, so a screen reader announced "slider, 4" (and axe-core
// fails the page: aria-input-field-name); a group of toggle buttons is announced without its description either.
// Each handle is named after its description and says the value its readout shows, each button group is named after
// its description; widgets are drawn after the page has loaded and change as a reader moves them, so each change of
// the page names (and re-reads) them again, once per frame.
function nameWidgetControls(root) {
  for (const control of root.querySelectorAll(".widget-slider, .widget-toggle-buttons")) {
    const label = control.querySelector(":scope > .widget-label");
    const name = label ? label.textContent.trim() : "";
    if (!name) continue;
    if (!label.id) label.id = `book-widget-label-${++nameWidgetControls.count}`;
    // A selection slider's value is an index (noUiSlider says "4"); the readout shows the option ("512").
    const readout = control.querySelector(".widget-readout");
    for (const handle of control.querySelectorAll('.noUi-handle[role="slider"]')) {
      if (!handle.hasAttribute("aria-labelledby")) handle.setAttribute("aria-labelledby", label.id);
      if (readout && readout.textContent.trim()) handle.setAttribute("aria-valuetext", readout.textContent.trim());
    }
    const buttons = control.querySelector(":scope > div:not(.slider-container)");
    if (control.classList.contains("widget-toggle-buttons") && buttons && !buttons.hasAttribute("role")) {
      buttons.setAttribute("role", "group");
      buttons.setAttribute("aria-labelledby", label.id);
    }
  }
}
nameWidgetControls.count = 0;
let namingScheduled = false;  // one pass per frame, however many elements the widget manager and MathJax add
new MutationObserver(() => {
  if (namingScheduled) return;
  namingScheduled = true;
  requestAnimationFrame(() => {
    namingScheduled = false;
    nameWidgetControls(document);
  });
}).observe(document.documentElement, {childList: true, subtree: true});

// A folded cell (an exercise's answer, `tools/answer_overlap.py`): MyST-NB names its toggle "Toggle hidden content"
// for a screen reader, hiding the line that says which exercise to try first. The visible line is its name instead.
document.addEventListener("DOMContentLoaded", () => {
  for (const summary of document.querySelectorAll(".tag_hide-input details.hide > summary[aria-label]")) {
    summary.removeAttribute("aria-label");
  }
});
