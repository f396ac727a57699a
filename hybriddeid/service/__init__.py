"""``hybriddeid serve``: the model behind an HTTP API (FastAPI on uvicorn; pip install 'hybriddeid[service]').

``limits`` (the limits and their defaults) and ``keys`` (API keys) need nothing beyond the core; ``work``
(a request's notes through ``processing.process_notes``) and ``pool`` (the forked workers) need pydantic;
``app`` (routes, auth, metrics) and ``server`` (uvicorn) need FastAPI, uvicorn and prometheus_client.
"""
