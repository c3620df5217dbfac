"""Framework integrations: `conveyor.contrib.django`, `.flask`, `.fastapi`.

Each needs its framework (`pip install 'conveyor[django]'`, `[flask]`, `[fastapi]`);
the core never imports them.
"""
