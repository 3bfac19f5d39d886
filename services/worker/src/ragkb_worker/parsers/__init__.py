"""One module per family of formats; each turns bytes into a `ParsedDocument` (text + sections).

`ragkb_worker.parsing.parse` is the single entry point that picks the parser for a media type.
"""
