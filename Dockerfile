# onnx-reducer service image (api, migrate and cpu worker): see docker-compose.yml and
# docs/deployment.md. The first stage builds a wheel from the project (pyproject.toml decides what
# ships: every package, the migrations, the web page); the image installs that wheel, nothing else.
FROM python:3.11-slim AS wheel
WORKDIR /src
COPY . .
RUN pip wheel --no-cache-dir --no-deps --wheel-dir /wheels .

FROM python:3.11-slim
ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 DATA_DIR=/data
RUN useradd --create-home --uid 10001 reducer && mkdir -p /data && chown reducer /data
COPY --from=wheel /wheels /wheels
RUN pip install --no-cache-dir /wheels/*.whl && rm -rf /wheels
WORKDIR /home/reducer
USER reducer
EXPOSE 8000
CMD ["onnx-reducer", "serve", "--no-local-worker", "--host", "0.0.0.0", "--port", "8000"]
