# onnx-reducer service image (api, migrate and cpu worker): see docker-compose.yml.
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 DATA_DIR=/data
WORKDIR /app
RUN useradd --create-home --uid 10001 reducer && mkdir -p /data && chown reducer /data
COPY pyproject.toml README.md ./
COPY reducer_core ./reducer_core
COPY reducer_cli ./reducer_cli
COPY checks ./checks
COPY engine ./engine
COPY persistence ./persistence
COPY api ./api
COPY worker ./worker
COPY migrations ./migrations
COPY examples ./examples
COPY docs ./docs
RUN pip install --no-cache-dir -e .
USER reducer
EXPOSE 8000
CMD ["onnx-reducer", "serve", "--no-local-worker", "--host", "0.0.0.0", "--port", "8000"]
