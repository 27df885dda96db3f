"""The applications the benchmark serves: fwrest's, the bare ceiling on fwrest's engine, and
the peers on uvicorn (raw ASGI, Starlette, FastAPI). Each does the same job per case."""
