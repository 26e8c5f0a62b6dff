"""How a number, a chart or a table is written: the renderers' shared words and shapes."""
