"""Sphinx configuration of daskpd's documentation site.

Build it with ``python -m sphinx -W --keep-going -b html docs <outdir>`` (the ``docs``
extra installs Sphinx, numpydoc and MyST-Parser); tests/test_docs_build.py runs exactly
that, so a warning -- a docstring numpydoc cannot parse, a broken cross-reference, a
page missing from every toctree -- fails the tests.  The Markdown pages are read by
MyST-Parser as they are written for GitHub; the API reference (``reference/``) is
generated from the docstrings by autodoc and numpydoc.
"""
from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # the daskpd next to these docs, not another installed copy

import daskpd  # noqa: E402

project = "daskpd"
author = "daskpd contributors"
release = version = daskpd.__version__

extensions = [
    "myst_parser",
    "sphinx.ext.autodoc",
    "sphinx.ext.autosummary",
    "numpydoc",
]

source_suffix = {".rst": "restructuredtext", ".md": "markdown"}
root_doc = "index"
exclude_patterns = ["_build"]

# Markdown as GitHub reads it: links to a heading use GitHub's anchors
myst_heading_anchors = 4
myst_enable_extensions = ["colon_fence"]

# the reference: autodoc reads the docstrings, numpydoc renders their sections
autodoc_typehints = "none"
autodoc_member_order = "bysource"
autosummary_generate = False
numpydoc_show_class_members = False
numpydoc_class_members_toctree = False
numpydoc_xref_param_type = False

html_theme = "alabaster"
html_title = f"daskpd {release}"
html_static_path: list[str] = []
