"""The fidelity harness (``make eval``): renderer and ruleset upgrades show up
as a reviewed diff, not a surprise.

A fixed corpus of structured sources (``corpus/``, listed in
``manifest.json``) is rendered in both profiles by the assembler's own
renderer. For each document and profile the harness records the page count,
each page's extracted text, an image fingerprint of selected pages
(``pdftoppm``, no anti-aliasing, in a grid of tiles) and the totals: each
list's summed amounts and each declared total, read back from the rendered
text and recomputed from the source. ``expected.json``, beside the manifest,
holds what was last approved; a run compares against it and reports which
documents changed, on which pages, where on the page, and whether any total
changed. ``--approve`` writes the new figures to ``expected.json``, to be
reviewed and committed like any other change.
"""
