"""``llmload capacity``: the command (``command``) and the search's phase plan (``plan``)."""
