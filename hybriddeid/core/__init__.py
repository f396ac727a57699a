"""Layer 0, the data the other layers share: documents and spans (``document``), label sets
(``taxonomy``), PHI sets (``profiles``), the precedence merger (``merge``), language packs
(``languages``) and component specs (``registry``). Nothing here knows of models or pipelines;
``io``, ``text``, ``resources`` and ``models`` are layer 0's other folders.
"""
