"""hf_uq's model card template (`template.md`, rendered by `hf_uq.hub.cards`) and example cards.

From a checkout the template is read from this folder. Installed, the folder is the package
``hf_uq.model_cards`` (see pyproject.toml / setup.py), so a wheel carries ``hf_uq/model_cards/template.md``.
"""
