"""Optional integrations with systems the cluster already runs (Slurm, ...).

Each is its own Django app, installed only when its settings switch it on. They sit above every
portal app: they import the portal's apps, never the other way round; the portal reaches them
through `portal.hooks` events named in settings `PORTAL_HOOKS`.
"""
