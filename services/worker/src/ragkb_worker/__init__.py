"""ragkb worker: parse → chunk → embed → index, driven by Celery tasks that take ids."""
