# The image docker-compose.yml runs: the web server by default, a Celery worker with a `celery` command.
FROM python:3.11-slim

ENV PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    RLWEB_VAR_DIR=/var/lib/rlweb

WORKDIR /app

# The pinned dependencies get a layer of their own, so that a code change does not reinstall torch.
COPY pyproject.toml ./
RUN python -c "import tomllib; print('\n'.join(tomllib.load(open('pyproject.toml', 'rb'))['project']['dependencies']))" \
        > /tmp/requirements.txt \
    && pip install -r /tmp/requirements.txt \
    && rm /tmp/requirements.txt

COPY . .
RUN pip install --no-deps -e . \
    && useradd --system --no-create-home rlweb \
    && mkdir -p /var/lib/rlweb \
    && chown rlweb:rlweb /var/lib/rlweb
USER rlweb

EXPOSE 8000
# Static files (plotly.js included) are served by whitenoise straight from the package, no collectstatic.
# Open server-sent-event streams never end by themselves: the graceful shutdown is capped.
CMD ["sh", "-c", "python manage.py migrate --noinput && exec uvicorn rlweb.asgi:application --host 0.0.0.0 --port 8000 --lifespan off --timeout-graceful-shutdown 5"]
