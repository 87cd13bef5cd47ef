"""The models runner builds from config (``model=...``), none downloaded: its own byte-level GPT (``gpt``) and MLP
(``mlp``); Hugging Face transformers causal LMs and sequence classifiers, from a configuration or a local
``save_pretrained`` directory (``hf``, their arguments checked by ``hf_checks``); timm image classifiers (``image``)."""
