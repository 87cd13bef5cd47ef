"""Every private transformers thing runner touches, one function each: the bottom layer's transformers door.

``apply_chat_template`` copies every message into plain data, and looks up the template and the special tokens,
on every call: two thirds of the time one render of a short conversation takes, and preparing a chat renders each
conversation once per assistant turn and once more. Messages runner makes are plain data already, so it renders
them with the template as ``apply_chat_template`` compiles it. Imported inside the function, so a transformers
refactor turns that fast path off with one warning (rendering goes through ``apply_chat_template`` again) and fails
one named test, ``tests/test_transformers_internals.py``, never ``import runner``.

Pinned against transformers 5.24.0.
"""

from __future__ import annotations

import warnings
from typing import Any


def compiled_chat_template(template: str) -> Any | None:
    """``template`` as ``apply_chat_template`` compiles it (a ``jinja2.Template`` in transformers' sandbox, with its
    filters and globals; cached by transformers); None, with one warning, where this transformers has no such
    function."""
    try:
        from transformers.utils.chat_template_utils import _compile_jinja_template
    except ImportError:  # pragma: no cover - a transformers without it
        warnings.warn("this transformers has no _compile_jinja_template: chat templates render through "
                      "apply_chat_template (slower)", stacklevel=2)
        return None
    return _compile_jinja_template(template)
