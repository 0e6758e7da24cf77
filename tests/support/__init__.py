"""What the tests share, importable as ``support`` (pyproject puts tests/ on pytest's path).

- ``support.headless``: a real ``specctl run --headless`` process and its journal.
- ``support.control_standin``: a stand-in supervisor behind a real control socket
  (also a script: ``python tests/support/control_standin.py SOCKET``).
- ``support.tui``: the console on a replayed journal fixture, and waiting on it.
- ``support.stand_in_modules``: stand-ins for SGLang's and torch's modules in the plugin's unit tests.
- ``support.sim_process``: specctl's simulator as a real process on loopback.
- ``support.sglang_source``: SGLang's source read from its release wheels (the
  ``sglang_source`` fixture in tests/conftest.py hands it out).
"""
