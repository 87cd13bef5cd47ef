"""The models runner builds from config (``model=...``), none downloaded: its GPT and MLP, transformers models from a
configuration or a ``save_pretrained`` directory (``hf``, checked by ``hf_checks``), timm classifiers (``image``)."""
