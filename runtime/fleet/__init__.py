"""Many servers at once: the inventory (the router's ``GET /workers`` or a plain list), each worker's
state read in parallel, and a settings change fanned out to every selected worker.

Runtime-level: it imports the core (settings, view-only words) and the probes' parsers, never the
supervisor, the control socket or any UI. One aiohttp session serves a whole pass; every request has
its own timeout, so a dead worker costs one timeout, never the fleet's patience.
"""
