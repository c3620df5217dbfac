"""Framework integrations: `conveyor.contrib.django`, `.flask`, `.fastapi`; and
`conveyor.contrib.http`, what an HTTP call's outcome means for the job.

Each integration needs its framework (`pip install 'conveyor[django]'`, `[flask]`,
`[fastapi]`); `http` reads whichever of httpx and requests is installed. The core
never imports them.
"""
