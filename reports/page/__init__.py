"""The report's pages: HTML, Markdown and terminal renderings of a summary."""
