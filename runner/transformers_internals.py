"""Every private transformers thing runner touches, one function each; pinned against transformers 5.24.0 by
``tests/test_transformers_internals.py``.

``apply_chat_template`` copies every message and looks up the template on every call (two thirds of a short render);
runner's messages are plain data already, so it renders them with the compiled template. A transformers refactor
turns that fast path off with one warning, never breaks ``import runner``.
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
