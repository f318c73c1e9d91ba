"""JupyterLab, as ``make lab`` gives it to a reader, driven in a real browser with a running kernel.

``make test-browser`` runs this suite (marker ``browser``) after installing JupyterLab (``requirements-lab.txt``, the
``make lab`` stamp). It starts ``jupyter-lab`` of the tests' environment on 127.0.0.1 (a port the OS picks, a token,
no browser, its root a temporary folder holding COPIES of the notebooks with their stored outputs removed: JupyterLab
saves what it runs, and whatever the page shows afterwards came from the kernel), with everything that would phone
home turned off: the news feed, the update check, the extension manager's PyPI listing (and the build check, which
only costs time). Kernels run as the notebooks' CI runs them (one thread, CPU, offline, TUTORIAL_LIB_DATA).

One JupyterLab page in Debian's Chromium (driven by Playwright) serves the three tests, opening each notebook with
File > Open from Path… and shutting its kernel down after (Kernel > Shut Down Kernel):

- an exercises notebook, Run > Run All Cells: every check cell prints its verdict, "not attempted yet (0/N points)";
- its solutions notebook, the same: every check says "correct (N/N points)";
- chapter 03: only the set-up cell, the cell that imports the softmax widget and the widget's cell run (selected,
  Ctrl+Enter; found by their code); JupyterLab's widget manager draws the widget, and clicking its "scaled" toggle,
  then pressing ← on its d_k slider, each changes the visible state label and the visible picture.

Every request to another origin is blocked and fails the test that made it, except the pictures the notebooks' own
markdown links (the Colab badges), which get a blank picture from the test so that a reader's offline page is what
is checked; JupyterLab itself must make none. A console error or an uncaught page error fails the test too (JupyterLab
logs none when nothing phones home). The server is shut down (its kernels with it) and the folder removed whatever
happens; the run prints its time and what was blocked. Without JupyterLab the suite is skipped, unless ``CI`` is
set: ``make test`` installs it, so there its absence is a failure.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from dataclasses import dataclass, field
from importlib.util import find_spec
from pathlib import Path

import nbformat
import pytest

from test_book_browser import VERDICT, chromium

ROOT = Path(__file__).resolve().parents[1]
EXERCISES = "exercises/01_tokens.ipynb"  # cheap checks (BPE on a few words): the kernel's work takes seconds
SOLUTIONS = "solutions/01_tokens.ipynb"
CHAPTER = "chapters/03_scaled_dot_product_attention.ipynb"
WIDGET_CALL = "softmax_saturation_widget("
LIVE, STATE_LABEL = ".tfs-live", ".tfs-state-label"  # tutorial_lib/widgets/_live.py's DOM hooks

SERVER_START_S = 120  # the loaded 2-core machine: the server answered after 12-15 s there
KERNEL_WORK_S = 180  # a kernel's start-up (torch imports) and a notebook's cells, on a loaded machine
WAIT_MS = 60_000  # the page: JupyterLab's bundle, a notebook's rendering, a widget's reaction

# Settings of JupyterLab's front end that would otherwise reach the internet (or ask to): the news feed and the
# update check (a toast asks on first start), and the extension manager (its panel lists PyPI).
FRONT_END_SETTINGS = {
    "@jupyterlab/apputils-extension/notification.jupyterlab-settings": {"fetchNews": "false", "checkForUpdates": False},
    "@jupyterlab/extensionmanager-extension/plugin.jupyterlab-settings": {"enabled": False},
}


def lab_executable(prefix: str | None = None) -> Path:
    """``jupyter-lab`` of the environment the tests run in (``.venv``), or skip (fail under CI) without it."""
    prefix = sys.prefix if prefix is None else prefix
    executable = Path(prefix) / "bin" / "jupyter-lab"
    if find_spec("jupyterlab") is None or not executable.exists():
        reason = (f"JupyterLab is not installed in {prefix}: `make .venv/.lab-installed` (or `make lab`) "
                  f"installs it from requirements-lab.txt")
        if os.environ.get("CI"):
            pytest.fail(f"{reason}; `make test` must install it before the browser suite (CI is set)")
        pytest.skip(reason)
    return executable


def copy_without_outputs(source: Path, target: Path) -> nbformat.NotebookNode:
    """``source`` written to ``target`` with no outputs, execution counts or widget state: whatever the page shows
    afterwards, the kernel produced."""
    notebook = nbformat.read(source, as_version=4)
    for cell in notebook.cells:
        if cell.cell_type == "code":
            cell.outputs, cell.execution_count = [], None
    notebook.metadata.pop("widgets", None)
    target.parent.mkdir(parents=True, exist_ok=True)
    nbformat.write(notebook, target)
    return notebook


MARKDOWN_IMAGE = re.compile(r"!\[[^\]]*\]\((https?://[^)\s]+)\)|<img[^>]+src=\"(https?://[^\"]+)\"")
# What the page gets instead of a notebook's own picture from the internet (the "Open in Colab" badge): a blank one.
PLACEHOLDER_SVG = '<svg xmlns="http://www.w3.org/2000/svg" width="117" height="20"/>'


def external_images(notebook: nbformat.NotebookNode) -> set[str]:
    """URLs of the pictures the notebook's markdown shows from the internet (the Colab badge): the only off-origin
    requests the page may make, since the reader's own content asks for them; JupyterLab itself must make none."""
    return {first or second for cell in notebook.cells if cell.cell_type == "markdown"
            for first, second in MARKDOWN_IMAGE.findall(cell.source)}


def check_cells(notebook: nbformat.NotebookNode) -> list[int]:
    """Indices of the cells that call ``check(...)`` (each prints one verdict)."""
    return [i for i, cell in enumerate(notebook.cells)
            if cell.cell_type == "code" and re.search(r"^check\(", cell.source, re.M)]


@dataclass
class Lab:
    url: str  # http://127.0.0.1:PORT/
    token: str
    root: Path
    log: Path
    notebooks: dict[str, nbformat.NotebookNode]

    @property
    def external_images(self) -> set[str]:
        return set().union(*(external_images(notebook) for notebook in self.notebooks.values()))

    def api(self, method: str, path: str) -> object:
        request = urllib.request.Request(f"{self.url}{path}", method=method, headers={"Authorization": f"token {self.token}"})
        with urllib.request.urlopen(request, timeout=30) as response:
            body = response.read()
        return json.loads(body) if body else None

    def log_tail(self, lines: int = 30) -> str:
        return "\n".join(self.log.read_text(encoding="utf-8", errors="replace").splitlines()[-lines:])



def _wait_for_server(process: subprocess.Popen, runtime: Path, log: Path) -> tuple[str, str]:
    """The URL and token of the server once it answers, read from the file it writes into its runtime folder."""
    deadline = time.monotonic() + SERVER_START_S
    info_file = runtime / f"jpserver-{process.pid}.json"
    while time.monotonic() < deadline:
        if process.poll() is not None:
            pytest.fail(f"jupyter lab exited with status {process.returncode}:\n{log.read_text(errors='replace')[-3000:]}")
        if info_file.exists():
            try:
                info = json.loads(info_file.read_text(encoding="utf-8"))
                url = f"http://127.0.0.1:{info['port']}/"
                with urllib.request.urlopen(f"{url}api/status?token={info['token']}", timeout=10) as response:
                    if response.status == 200:
                        return url, info["token"]
            except (ValueError, KeyError, OSError):  # half-written file, or not listening yet
                pass
        time.sleep(0.2)
    pytest.fail(f"jupyter lab did not answer within {SERVER_START_S} s:\n{log.read_text(errors='replace')[-3000:]}")


def _stop(process: subprocess.Popen, lab: Lab | None) -> None:
    """Shut the server down through its API (it stops its kernels), then by signal if it does not go."""
    if process.poll() is None and lab is not None:
        try:
            lab.api("POST", "api/shutdown")
            process.wait(timeout=30)
        except (OSError, subprocess.TimeoutExpired):
            pass
    if process.poll() is None:
        os.killpg(process.pid, signal.SIGTERM)  # its own process group (start_new_session); it stops its kernels
        try:
            process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait(timeout=15)


@pytest.fixture(scope="module")
def lab():
    """JupyterLab serving copies of the three notebooks from a temporary root, offline; stopped and removed after."""
    executable = lab_executable()
    chromium()  # fail early, before the server starts, when there is no browser
    temp = Path(tempfile.mkdtemp(prefix="tfs-jupyterlab-"))
    root, home = temp / "root", temp / "jupyter"
    notebooks = {path: copy_without_outputs(ROOT / path, root / path) for path in (EXERCISES, SOLUTIONS, CHAPTER)}
    settings = home / "lab-settings"
    for name, values in FRONT_END_SETTINGS.items():
        (settings / name).parent.mkdir(parents=True, exist_ok=True)
        (settings / name).write_text(json.dumps(values), encoding="utf-8")
    # The page's static configuration: no check of JupyterLab's own build on load (a reader's `make lab` is a
    # prebuilt JupyterLab; the check only costs the loaded test machine seconds of CPU).
    (home / "config" / "labconfig").mkdir(parents=True)
    (home / "config" / "labconfig" / "page_config.json").write_text(json.dumps({"buildCheck": False}), encoding="utf-8")
    runtime = home / "runtime"
    environment = os.environ | {
        # The server and its kernels see only this session's Jupyter folders (no user config, no saved workspace).
        "JUPYTER_CONFIG_DIR": str(home / "config"),
        "JUPYTER_DATA_DIR": str(home / "data"),  # the kernel comes from the environment's share/jupyter
        "JUPYTER_RUNTIME_DIR": str(runtime),
        "JUPYTERLAB_SETTINGS_DIR": str(settings),
        "JUPYTERLAB_WORKSPACES_DIR": str(home / "workspaces"),
        "IPYTHONDIR": str(home / "ipython"),
        # The kernels as the notebooks' CI runs them: one thread, CPU, offline, figures inline.
        "TUTORIAL_LIB_DATA": os.environ.get("TUTORIAL_LIB_DATA", str(ROOT.parent / "shared" / "data")),
        "OMP_NUM_THREADS": "1",
        "TUTORIAL_LIB_DEVICE": "cpu",
        "HF_HUB_OFFLINE": "1",
        "MPLBACKEND": "module://matplotlib_inline.backend_inline",
        "PYDEVD_DISABLE_FILE_VALIDATION": "1",
    }
    token = secrets.token_hex(16)
    command = [
        str(executable),
        "--no-browser",
        "--ServerApp.ip=127.0.0.1",
        "--ServerApp.port=0",  # the OS picks a free port; the server writes it into its runtime file
        "--ServerApp.port_retries=0",
        f"--IdentityProvider.token={token}",
        f"--ServerApp.root_dir={root}",
        # Nothing phones home: no news feed, no update check, no PyPI listing of extensions.
        "--LabApp.news_url=None",
        "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate",
        "--LabApp.extension_manager=readonly",
        *(["--allow-root"] if os.getuid() == 0 else []),  # as `make lab` (CI containers run as root)
    ]
    log = temp / "jupyter-lab.log"
    process = None
    server = None
    try:
        with open(log, "wb") as log_file:
            process = subprocess.Popen(command, cwd=root, env=environment, stdin=subprocess.DEVNULL, stdout=log_file,
                                       stderr=subprocess.STDOUT, start_new_session=True)
        url, token_ = _wait_for_server(process, runtime, log)
        assert token_ == token, "the server does not use the token it was given"
        server = Lab(url, token, root, log, notebooks)
        yield server
    finally:
        if process is not None:
            _stop(process, server)
        shutil.rmtree(temp, ignore_errors=True)


@dataclass
class Watched:
    """What the page did that it must not: requests to other origins, console errors, uncaught errors."""
    off_origin: list[str] = field(default_factory=list)
    stubbed: list[str] = field(default_factory=list)  # the notebooks' own internet pictures, answered locally
    errors: list[str] = field(default_factory=list)

    def problems(self, since: tuple[int, int] = (0, 0)) -> list[str]:
        off_origin, errors = self.off_origin[since[0]:], self.errors[since[1]:]
        return ([f"requests to other origins (blocked): {sorted(set(off_origin))[:5]}"] if off_origin else []) + errors[:5]

    def mark(self) -> tuple[int, int]:
        return len(self.off_origin), len(self.errors)


@dataclass
class Session:
    page: object  # playwright.sync_api.Page
    watched: Watched
    checked: tuple[int, int] = (0, 0)  # how much of ``watched`` a test has already answered for

    def new_problems(self) -> list[str]:
        """What the page did wrong since the last test checked (the first test answers for the page's load too)."""
        problems, self.checked = self.watched.problems(since=self.checked), self.watched.mark()
        return problems


@pytest.fixture(scope="module")
def jupyterlab(lab, request):
    """One JupyterLab page for the module's tests, as a reader keeps one open (a page load is seconds of CPU): the
    app at its root, every off-origin request blocked and recorded, console and page errors recorded."""
    from playwright.sync_api import sync_playwright

    watched = Watched()
    allowed_pictures = lab.external_images

    def route(route) -> None:
        url = route.request.url
        if url.startswith(lab.url):
            route.continue_()
        elif url in allowed_pictures:
            watched.stubbed.append(url)
            route.fulfill(status=200, content_type="image/svg+xml", body=PLACEHOLDER_SVG)
        else:
            watched.off_origin.append(url)
            route.abort()

    start = time.perf_counter()
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=chromium())
        try:
            context = browser.new_context(viewport={"width": 1280, "height": 900})
            context.route("**/*", route)
            page = context.new_page()
            page.on("console", lambda message: watched.errors.append(f"console error: {message.text}")
                    if message.type == "error" else None)
            page.on("pageerror", lambda error: watched.errors.append(f"page error: {error}"))
            page.goto(f"{lab.url}lab?token={lab.token}", wait_until="load", timeout=WAIT_MS)
            expect_within(page, page.locator(".jp-DirListing-item", has_text="exercises"),
                          "JupyterLab to start and list its root folder", lab)
            session = Session(page, watched)
            yield session
            leftover = session.new_problems()
            assert not leftover, "JupyterLab's page misbehaved after the last test:\n  " + "\n  ".join(leftover)
        finally:
            browser.close()
    terminal = request.config.pluginmanager.get_plugin("terminalreporter")
    capture = request.config.pluginmanager.get_plugin("capturemanager")
    if terminal is not None and capture is not None:
        with capture.global_and_fixture_disabled():
            terminal.write_line(
                f"\njupyterlab: {time.perf_counter() - start:.1f} s in the browser, {len(watched.off_origin)} off-origin "
                f"request(s) blocked, {len(watched.stubbed)} picture(s) of the notebooks' markdown answered locally "
                f"({', '.join(sorted(set(watched.stubbed))) or 'none'}), {len(watched.errors)} console/page error(s)")


def menu(page, *path: str) -> None:
    """Click through the menu bar: ``menu(page, "Run", "Run All Cells")``."""
    page.locator(".lm-MenuBar-item", has_text=re.compile(f"^{re.escape(path[0])}$")).click()
    for item in path[1:]:
        page.locator(".lm-Menu:visible .lm-Menu-item", has_text=re.compile(f"^{re.escape(item)}")).first.click()


@pytest.fixture
def open_notebook(lab, jupyterlab):
    """``open_notebook(path)``: the notebook opened with File > Open from Path…, its kernel started and idle; its
    locator. After the test its kernel is shut down (Kernel > Shut Down Kernel), and the test fails if the page
    meanwhile requested another origin or logged an error."""
    page = jupyterlab.page
    opened = []

    def open_(path: str):
        menu(page, "File", "Open from Path")
        dialog = page.locator(".jp-Dialog")
        dialog.locator("input").fill(path)
        dialog.locator("button.jp-mod-accept").click()
        notebook = page.locator(".jp-NotebookPanel:visible .jp-Notebook")
        expect_within(page, notebook.locator(".jp-Cell").first, f"{path} to open in JupyterLab", lab)
        opened.append(path)
        # The status bar says "<kernel> | Idle" once the kernel is connected ("No Kernel | Initializing" before; the
        # toolbar's indicator alone reads idle before the kernel exists, and a Run then asks for a kernel).
        wait_until(page, KERNEL_IDLE, f"the kernel of {path} to start and be idle", lab, KERNEL_WORK_S * 1000)
        return notebook

    open_.page = page
    yield open_
    try:
        problems = jupyterlab.new_problems()
        assert not problems, "JupyterLab's page misbehaved:\n  " + "\n  ".join(problems)
    finally:
        if opened:
            # Kernel > Shut Down Kernel, not waited for: the kernel exits while the next test runs (waiting costs
            # seconds on a loaded machine). The tab stays open, hidden behind the next notebook's.
            try:
                page.keyboard.press("Escape")  # a menu or dialog a failure left open
                menu(page, "Kernel", "Shut Down Kernel")
            except Exception:  # noqa: BLE001 - best effort; the server's shutdown stops every kernel anyway
                pass


KERNEL_IDLE = """() => Array.from(document.querySelectorAll('.jp-StatusBar-TextItem'))
  .some((item) => /^(?!No Kernel).+ \\| Idle$/.test(item.textContent.trim()))"""


def wait_until(page, condition: str, what: str, lab: Lab, timeout_ms: int = WAIT_MS) -> None:
    """Wait for the JavaScript ``condition`` to hold, or fail as :func:`expect_within` does."""
    try:
        page.wait_for_function(condition, timeout=timeout_ms)
    except Exception as error:  # noqa: BLE001
        fail_showing(page, what, error, lab, timeout_ms)


def fail_showing(page, what: str, error: Exception, lab: Lab, timeout_ms: int) -> None:
    shown = page.evaluate("() => document.body.innerText").strip()
    pytest.fail(f"waited {timeout_ms / 1000:.0f} s for {what}: {type(error).__name__}\n"
                f"--- the page showed (end):\n{shown[-2500:]}\n--- jupyter lab's log (end):\n{lab.log_tail()}",
                pytrace=False)


def expect_within(page, locator, what: str, lab: Lab, timeout_ms: int = WAIT_MS) -> None:
    """Wait for ``locator`` to be visible, or fail saying what was awaited, what the page showed and the server log."""
    try:
        locator.first.wait_for(state="visible", timeout=timeout_ms)
    except Exception as error:  # noqa: BLE001 - Playwright's TimeoutError, turned into a readable failure
        fail_showing(page, what, error, lab, timeout_ms)


def run_all_cells(page) -> None:
    """Run > Run All Cells, from the menu bar, as a reader does."""
    menu(page, "Run", "Run All Cells")


def verdicts(notebook, cells: list[int]) -> list[str]:
    return [notebook.locator(".jp-Cell").nth(i).locator(".jp-OutputArea-output").first.text_content().strip()
            for i in cells]


def wait_for_verdicts(page, notebook, cells: list[int], lab: Lab) -> list[str]:
    """Each check cell's output, once every one of them shows a verdict."""
    for i in cells:
        output = notebook.locator(".jp-Cell").nth(i).locator(".jp-OutputArea-output", has_text=re.compile(VERDICT))
        expect_within(page, output, f"cell {i} to print a check's verdict", lab, timeout_ms=KERNEL_WORK_S * 1000)
    return verdicts(notebook, cells)


@pytest.mark.browser
def test_nothing_phones_home(lab):
    """The server's news feed and update check answer empty without a request out, the extension manager cannot
    reach PyPI, and the settings the front end reads ask for none of them (nor show the first-start toast asking)."""
    assert lab.api("GET", "lab/api/news") == {"news": []}
    assert lab.api("GET", "lab/api/update") == {"notification": None}
    assert "Extension Manager is 'readonly'" in lab.log.read_text(encoding="utf-8", errors="replace")
    for name, values in FRONT_END_SETTINGS.items():
        plugin = name.removesuffix(".jupyterlab-settings").replace("/", ":").replace(":", "/", 1)
        read = lab.api("GET", f"lab/api/settings/{plugin}")["settings"]  # the user settings the server serves
        assert {key: read.get(key) for key in values} == values, f"{plugin}: the server serves {read}"


@pytest.mark.browser
def test_exercises_notebook_runs_and_shows_verdicts(lab, open_notebook):
    notebook = open_notebook(EXERCISES)
    page = open_notebook.page
    cells = check_cells(lab.notebooks[EXERCISES])
    assert len(cells) >= 3, f"{EXERCISES} has {len(cells)} check cells"
    assert notebook.locator(".jp-OutputArea-output").count() == 0, "the copy should start without outputs"
    run_all_cells(page)
    shown = wait_for_verdicts(page, notebook, cells, lab)
    wrong = [text for text in shown if not re.match(r"^\d\d\.\w+: not attempted yet \(0/\d+ points?\)", text)]
    assert not wrong, f"an untouched exercise should be 'not attempted yet' with 0 points: {wrong}"


@pytest.mark.browser
def test_solutions_notebook_runs_and_every_check_is_correct(lab, open_notebook):
    notebook = open_notebook(SOLUTIONS)
    page = open_notebook.page
    cells = check_cells(lab.notebooks[SOLUTIONS])
    assert len(cells) == len(check_cells(lab.notebooks[EXERCISES])), "solutions and exercises differ in check cells"
    run_all_cells(page)
    shown = wait_for_verdicts(page, notebook, cells, lab)
    full_points = [re.match(r"^\d\d\.\w+: correct \((\d+)/(\d+) points?\)", text) for text in shown]
    wrong = [text for text, match in zip(shown, full_points) if not match or match[1] != match[2]]
    assert not wrong, f"every solution should be correct with full points: {wrong}"


def widget_cells(notebook: nbformat.NotebookNode) -> list[int]:
    """The cells chapter 03 needs to show the softmax widget, found by their code: the set-up cell, the cell that
    imports the widget, and the cell that calls it."""
    code = [(i, cell.source) for i, cell in enumerate(notebook.cells) if cell.cell_type == "code"]
    setup = [i for i, source in code if "setup_notebook(" in source]
    imported = re.compile(r"^from tutorial_lib\.widgets import [^#]*\bsoftmax_saturation_widget\b", re.M | re.S)
    imports = [i for i, source in code if imported.search(source) and WIDGET_CALL not in source]
    calls = [i for i, source in code if source.lstrip().startswith(WIDGET_CALL)]
    assert len(setup) == 1 and len(imports) == 1 and len(calls) == 1, (
        f"chapter 03 should have one set-up cell, one cell importing the widget and one calling it: "
        f"{setup}, {imports}, {calls}")
    return [setup[0], imports[0], calls[0]]


def run_cell(page, notebook, index: int, lab: Lab) -> None:
    """Select cell ``index`` (a click on its prompt), run it with Ctrl+Enter, and wait until it has run."""
    cell = notebook.locator(".jp-Cell").nth(index)
    cell.locator(".jp-InputPrompt").click()
    page.keyboard.press("Control+Enter")
    done = cell.locator(".jp-InputPrompt", has_text=re.compile(r"\[\d+\]"))
    expect_within(page, done, f"cell {index} to finish running", lab, timeout_ms=KERNEL_WORK_S * 1000)
    traceback = cell.locator(".jp-OutputArea-output", has_text="Traceback")  # warnings on stderr are no failure
    assert traceback.count() == 0, f"cell {index} raised: {traceback.first.text_content()[-1500:]}"


def visible_state(live) -> tuple[str, str]:
    """The visible view's label and its picture (the image's data URL) in a live widget."""
    label = live.locator(f"{STATE_LABEL}:visible")
    assert label.count() == 1, f"{label.count()} state labels visible, expected exactly one"
    image = live.locator("img:visible")
    assert image.count() == 1, f"{image.count()} pictures visible, expected exactly one"
    return label.text_content().strip(), image.get_attribute("src")


def wait_for_state_change(page, live, before: tuple[str, str], what: str) -> tuple[str, str]:
    try:
        page.wait_for_function(
            """([live, label]) => {
              const shown = Array.from(live.querySelectorAll('.tfs-state-label')).filter((el) => el.offsetParent !== null);
              return shown.length === 1 && shown[0].textContent.trim() !== label;
            }""",
            arg=[live.element_handle(), before[0]], timeout=WAIT_MS)
    except Exception:  # noqa: BLE001
        pytest.fail(f"{what} did not change the visible state: still {before[0]!r}", pytrace=False)
    after = visible_state(live)
    assert after[1] != before[1], f"{what} changed the label to {after[0]!r} but not the picture"
    return after


@pytest.mark.browser
def test_chapter_03_softmax_widget_is_live_with_a_kernel(lab, open_notebook):
    notebook = open_notebook(CHAPTER)
    page = open_notebook.page
    setup, imports, call = widget_cells(lab.notebooks[CHAPTER])
    for index in (setup, imports, call):
        run_cell(page, notebook, index, lab)
    live = notebook.locator(".jp-Cell").nth(call).locator(LIVE)
    expect_within(page, live, "the softmax widget to be drawn by JupyterLab's widget manager", lab)
    live.scroll_into_view_if_needed()
    start = visible_state(live)
    assert start[0] == "scores = q·k (unscaled) · d_k = 512", f"the widget starts at {start[0]!r}"

    live.locator("button", has_text="scaled)").filter(has_not_text="unscaled").click()
    scaled = wait_for_state_change(page, live, start, "clicking the 'scaled' toggle")
    assert scaled[0] == "scores = q·k / √d_k (scaled) · d_k = 512", scaled[0]

    from tutorial_lib.widgets.softmax_saturation import D_HEAD_CHOICES

    below = D_HEAD_CHOICES[D_HEAD_CHOICES.index(512) - 1]  # the slider's option left of 512
    handle = live.locator(".noUi-handle").first  # the SelectionSlider (noUiSlider): focus its handle, press ←
    handle.focus()
    page.keyboard.press("ArrowLeft")
    smaller = wait_for_state_change(page, live, scaled, "pressing ← on the d_k slider")
    assert smaller[0] == f"scores = q·k / √d_k (scaled) · d_k = {below}", smaller[0]
    readout = live.locator(".widget-readout").first.text_content().strip()
    assert readout == str(below), f"the slider's readout says {readout!r}, expected {below}"


# --- the helpers themselves (these run without a browser or JupyterLab, in every `pytest tests`) --------------------


def test_the_notebooks_hold_what_the_browser_tests_look_for():
    exercises, solutions, chapter = (nbformat.read(ROOT / path, as_version=4) for path in (EXERCISES, SOLUTIONS, CHAPTER))
    assert len(check_cells(exercises)) >= 3 and len(check_cells(exercises)) == len(check_cells(solutions))
    setup, imports, call = widget_cells(chapter)
    assert setup < imports < call
    assert "https://colab.research.google.com/assets/colab-badge.svg" in external_images(exercises)


def test_the_copy_has_no_outputs_and_no_widget_state(tmp_path):
    copy = copy_without_outputs(ROOT / CHAPTER, tmp_path / CHAPTER)
    stored = nbformat.read(tmp_path / CHAPTER, as_version=4)
    for notebook in (copy, stored):
        code = [cell for cell in notebook.cells if cell.cell_type == "code"]
        assert code and all(cell.outputs == [] and cell.execution_count is None for cell in code)
        assert "widgets" not in notebook.metadata


def test_missing_jupyterlab_skips_locally_and_fails_under_ci(tmp_path, monkeypatch):
    monkeypatch.delenv("CI", raising=False)
    with pytest.raises(pytest.skip.Exception, match="make .venv/.lab-installed"):
        lab_executable(prefix=str(tmp_path))
    monkeypatch.setenv("CI", "1")
    with pytest.raises(pytest.fail.Exception, match="CI is set"):
        lab_executable(prefix=str(tmp_path))
