"""Layer 5, the review page: folders read for review (``folders``), the page's loopback server
(``server``) and its HTML, script and style (``assets/``, shipped as package data).
"""
