"""The documentation site builds without a warning, and its API reference holds every
public name.

Sphinx builds docs/ (docs/conf.py: MyST-Parser for the Markdown pages, autodoc and
numpydoc for the reference) with ``-W --keep-going``, so a docstring numpydoc or
docutils cannot parse, a broken link between pages, or a page left out of every
toctree fails here with Sphinx's own messages.  Sphinx comes with the ``docs`` extra,
which ``.ci/setup`` installs."""
from __future__ import annotations

import importlib
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("sphinx", reason="the docs extra (pip install -e '.[docs]') is not installed")
pytest.importorskip("numpydoc", reason="the docs extra (pip install -e '.[docs]') is not installed")
pytest.importorskip("myst_parser", reason="the docs extra (pip install -e '.[docs]') is not installed")

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    out = tmp_path_factory.mktemp("site")
    proc = subprocess.run(
        [sys.executable, "-m", "sphinx", "-W", "--keep-going", "-q", "-b", "html",
         "-d", str(out / ".doctrees"), str(REPO / "docs"), str(out / "html")],
        capture_output=True, text=True, cwd=REPO, timeout=900)
    assert proc.returncode == 0, f"sphinx-build -W failed:\n{proc.stderr}{proc.stdout}"
    return out / "html"


def documented(site: Path) -> set[str]:
    """The dotted names the reference pages define an anchor for."""
    html = "".join(p.read_text(encoding="utf-8") for p in (site / "reference").glob("*.html"))
    return set(re.findall(r'<dt class="sig sig-object py" id="([\w.]+)"', html))


def test_the_site_builds_without_warnings(site):
    assert (site / "index.html").exists()
    pages = {p.stem for p in site.glob("*.html")}
    md = {p.stem for p in (REPO / "docs").glob("*.md")}
    assert md <= pages, f"pages not built: {sorted(md - pages)}"


def test_every_public_name_is_in_the_reference(site):
    import daskpd

    ids = documented(site)
    missing = [n for n in daskpd.__all__ if f"daskpd.{n}" not in ids]
    assert not missing, f"docs/reference/ does not document daskpd.{missing}"


@pytest.mark.parametrize("module", ["daskpd.model", "daskpd.io", "daskpd.job"])
def test_every_public_name_of_a_public_module_is_in_the_reference(site, module):
    """Names also exported by ``daskpd`` are documented once, as ``daskpd.NAME``."""
    import daskpd

    mod = importlib.import_module(module)
    ids = documented(site)
    missing = [n for n in mod.__all__
               if f"{module}.{n}" not in ids and not (n in daskpd.__all__ and getattr(daskpd, n) is getattr(mod, n))]
    assert not missing, f"docs/reference/ does not document {module}.{missing}"


def test_the_result_classes_and_the_display_are_in_the_reference(site):
    import daskpd
    from daskpd import datasets, results

    ids = documented(site)
    wanted = [f"daskpd.{n}" for n in daskpd.__all__ if n.endswith("Result")]
    wanted += ["daskpd.results.Result", "daskpd.results.CurveResult", "daskpd.plotting.PartialDependenceDisplay"]
    wanted += [f"daskpd.datasets.{n}" for n in ("Quadratic", "Bulldozer", "Linear", "Lake")]
    assert len(wanted) > 15 and results.CurveResult and datasets.Lake
    assert not [n for n in wanted if n not in ids], [n for n in wanted if n not in ids]
