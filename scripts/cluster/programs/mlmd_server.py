"""ML Metadata's gRPC service for the local cluster's KFP (docs/cluster.md, "KFP's execution path").

KFP 2.1.0's driver and launcher record every execution and artifact in ML Metadata over gRPC
(kubeflow/pipelines, backend/src/v2/metadata/client.go; the server is manifests/kustomize/base/metadata/base/
metadata-grpc-deployment.yaml, image gcr.io/tfx-oss-public/ml_metadata_store_server). That server is a C++ binary
built with Bazel, published only as a container image. PyPI's `ml-metadata` wheel carries the same C++
MetadataStore as a Python extension (ml_metadata/metadata_store/pywrap), whose functions take and return the
serialized protos of the gRPC service's own requests and responses (ml_metadata/metadata_store/metadata_store.py,
_pywrap_cc_call). This module puts that store behind the service's gRPC name, one method for one method, bytes in
and bytes out: the store's logic, schema and errors are MLMD's own; only the transport is this file.

Calls are serialized with a lock: upstream's server opens a store per call because a MetadataStore is not
thread-safe (ml_metadata/metadata_store/metadata_store_service_impl.cc); one store behind a lock is the same.

Run with the `ml-metadata` virtualenv (mlmd.py makes it): python mlmd_server.py --host H --port P --db FILE
"""

from __future__ import annotations

import argparse
import threading
from concurrent import futures

import grpc
from ml_metadata.metadata_store.pywrap.metadata_store_extension import metadata_store as store_cc
from ml_metadata.proto import metadata_store_pb2, metadata_store_service_pb2

SERVICE = "ml_metadata.MetadataStoreService"
CODES = {code.value[0]: code for code in grpc.StatusCode}


def _store(db: str) -> object:
    config = metadata_store_pb2.ConnectionConfig()
    config.sqlite.filename_uri = db
    config.sqlite.connection_mode = metadata_store_pb2.SqliteMetadataSourceConfig.READWRITE_OPENCREATE
    migration = metadata_store_pb2.MigrationOptions(enable_upgrade_migration=True)
    return store_cc.CreateMetadataStore(config.SerializeToString(), migration.SerializeToString())


def _handlers(store: object) -> dict[str, grpc.RpcMethodHandler]:
    lock = threading.Lock()
    handlers = {}
    service = metadata_store_service_pb2.DESCRIPTOR.services_by_name["MetadataStoreService"]
    for method in service.methods:
        function = getattr(store_cc, method.name, None)

        def call(
            request: bytes, context: grpc.ServicerContext, function: object = function, name: str = method.name
        ) -> bytes:
            if function is None:
                context.abort(grpc.StatusCode.UNIMPLEMENTED, f"{name} is not in this ml-metadata build")
            with lock:
                response, message, code = function(store, request)  # type: ignore[operator]
            if code != 0:
                context.abort(CODES.get(code, grpc.StatusCode.UNKNOWN), message.decode("utf-8", "replace"))
            return bytes(response)

        # No (de)serializers: requests and responses stay the bytes the C++ store reads and writes.
        handlers[method.name] = grpc.unary_unary_rpc_method_handler(call)
    return handlers


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--host", required=True)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--db", required=True)
    args = parser.parse_args()
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=8))
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(SERVICE, _handlers(_store(args.db))),))
    server.add_insecure_port(f"{args.host}:{args.port}")
    server.start()
    print(f"ml-metadata serving {SERVICE} on {args.host}:{args.port} ({args.db})", flush=True)
    server.wait_for_termination()


if __name__ == "__main__":
    main()
