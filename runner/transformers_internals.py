"""Every private transformers thing runner touches, one function each, pinned against transformers 5.24.0 by
``tests/test_transformers_internals.py``; a refactor turns a fast path off with one warning."""

from __future__ import annotations

import warnings
from typing import Any


def compiled_chat_template(template: str) -> Any | None:
    """``template`` as ``apply_chat_template`` compiles it (cached by transformers), or None with one warning."""
    # apply_chat_template copies every message and looks the template up on every call (two thirds of a short
    # render); runner's messages are plain data already.
    try:
        from transformers.utils.chat_template_utils import _compile_jinja_template
    except ImportError:  # pragma: no cover - a transformers without it
        warnings.warn("this transformers has no _compile_jinja_template: chat templates render through "
                      "apply_chat_template (slower)", stacklevel=2)
        return None
    return _compile_jinja_template(template)
