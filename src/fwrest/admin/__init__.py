"""Administration commands that edit what a running service reads (SPEC 13.6): the users and
clients of an ``onAuthparams`` file, and brute-force lock-outs in the state store. No HTTP."""
