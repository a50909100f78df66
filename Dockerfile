# One image for every process of the portal (docker-compose.yml picks the command):
#   web     gunicorn portal.wsgi:application            (the default CMD)
#   worker  celery -A portal worker -Q portal
#   beat    celery -A portal beat
#   agent   python -m workers.agent --backend real      (on GPU nodes; holds no DB credentials)
FROM python:3.11-slim

# PYTHONPATH puts the source tree in /app ahead of the installed copy in site-packages, so
# settings.BASE_DIR is /app (templates/, static/ and var/ live there) whichever tool starts
# Python: gunicorn, celery, manage.py or `python -m workers.agent`.
ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PYTHONPATH=/app

WORKDIR /app

# Dependencies first, read from pyproject.toml (where they are pinned), so this layer is
# rebuilt only when pyproject.toml changes, not on every code change.
COPY pyproject.toml README.md ./
RUN python -c "import tomllib; print('\n'.join(tomllib.load(open('pyproject.toml', 'rb'))['project']['dependencies']))" \
        > /tmp/requirements.txt \
    && pip install -r /tmp/requirements.txt \
    && rm /tmp/requirements.txt

COPY manage.py ./
COPY portal ./portal
COPY apps ./apps
COPY workers ./workers
COPY portal_cli ./portal_cli
COPY templates ./templates
COPY static ./static
# Install the project itself (dependencies are already satisfied by the layer above).
RUN pip install . && rm -rf build ./*.egg-info

# Static files are collected at build time; whitenoise serves them from var/static.
# The settings refuse DJANGO_DEBUG=0 without a random key and allowed hosts, so this RUN step
# draws a throwaway key of its own; it is not in the image's environment.
RUN DJANGO_DEBUG=0 \
    DJANGO_SECRET_KEY="$(python -c 'import secrets; print(secrets.token_urlsafe(50))')" \
    DJANGO_ALLOWED_HOSTS=localhost \
    python manage.py collectstatic --noinput

# Non-root at run time. The code and collected static files stay root-owned (read-only to the
# app); only var/ itself is writable (the settings create it on import).
RUN useradd --system --uid 10001 --user-group --home-dir /app --no-create-home portal \
    && mkdir -p /app/var \
    && chown portal:portal /app/var
USER portal

EXPOSE 8000
# gunicorn's sync workers (it reads WEB_CONCURRENCY; its own default of one worker serialises
# every request). Override per host: gunicorn advises 2 x cores + 1.
ENV WEB_CONCURRENCY=4
CMD ["gunicorn", "portal.wsgi:application", "--bind", "0.0.0.0:8000", "--access-logfile", "-"]
