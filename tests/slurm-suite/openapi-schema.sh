#!/usr/bin/env bash
# Prints a JSON Schema that validates one of the documents `squeue --json`, `sinfo --json` and
# `sacct --json` print, made from the OpenAPI schemas of Slurm 22.05.8's REST plugins
# (src/plugins/openapi/v0.0.38/openapi.json and dbv0.0.38/openapi.json).
#
# Slurm's source comes from Debian's source package into the git-ignored cache (.slurm-suite/ at
# the repository root, or $SLURM_SUITE_CACHE), as tests/slurm-suite/run.sh gets it
# (source.sh); only the two openapi.json files are unpacked. Nothing of Slurm's is committed.
#
# Usage: tests/slurm-suite/openapi-schema.sh jobs|nodes|accounting
#   jobs        v0.0.38_jobs_response     (squeue --json)
#   nodes       v0.0.38_nodes_response    (sinfo --json)
#   accounting  dbv0.0.38_job_info        (sacct --json)
#
# The printed document keeps both files' `components` (dbv0.0.38_job_info refers to v0.0.38_meta,
# which only the other file defines) and validates the response through
# `$ref: "#/components/schemas/NAME"`. OpenAPI's schemas require no key and allow any other; this
# one is stricter, as Drover promises every key of the schema and no other: every object schema
# that lists properties requires all of them and forbids the rest (additionalProperties: false),
# so a missing key, an extra one or a wrong type all fail validation.
# Exit status: 0 with the schema on stdout; 2 when the source cannot be had (why on stderr).
set -euo pipefail

REPO=$(cd "$(dirname "$0")/../.." && pwd)
CACHE=${SLURM_SUITE_CACHE:-$REPO/.slurm-suite}
SLURM_VERSION=22.05.8

die() { echo "openapi-schema: error: $*" >&2; exit 2; }

case "${1:-}" in
    jobs) NAME=v0.0.38_jobs_response ;;
    nodes) NAME=v0.0.38_nodes_response ;;
    accounting) NAME=dbv0.0.38_job_info ;;
    *) die "usage: $0 jobs|nodes|accounting" ;;
esac

dir=$CACHE/src
plugins=$(ls -d "$dir"/slurm-*/src/plugins/openapi 2>/dev/null | head -n1 || true)
if [ -z "$plugins" ] || [ ! -f "$plugins/v0.0.38/openapi.json" ] || [ ! -f "$plugins/dbv0.0.38/openapi.json" ]; then
    # shellcheck source=tests/slurm-suite/source.sh
    . "$REPO/tests/slurm-suite/source.sh"
    orig=$(slurm_orig_tarball "$dir" "$SLURM_VERSION") || die "no Slurm $SLURM_VERSION source (see above)"
    tar -xf "$orig" -C "$dir" --wildcards '*/src/plugins/openapi/v0.0.38/openapi.json' \
        '*/src/plugins/openapi/dbv0.0.38/openapi.json' || die "unpacking the openapi.json files of $orig"
    plugins=$(ls -d "$dir"/slurm-*/src/plugins/openapi | head -n1)
fi

python3 - "$plugins/v0.0.38/openapi.json" "$plugins/dbv0.0.38/openapi.json" "$NAME" <<'PY'
import json, sys

def strict(node):
    """Every object schema with properties requires them all and allows no other key."""
    if isinstance(node, dict):
        for value in node.values():
            strict(value)
        properties = node.get("properties")
        if isinstance(properties, dict) and properties:
            node["required"] = sorted(properties)
            node["additionalProperties"] = False
    elif isinstance(node, list):
        for value in node:
            strict(value)

schemas = {}
for path in sys.argv[1:3]:
    with open(path) as f:
        schemas.update(json.load(f)["components"]["schemas"])
name = sys.argv[3]
if name not in schemas:
    sys.exit(f"openapi-schema: error: no schema {name}")
strict(schemas)
document = {
    "$schema": "http://json-schema.org/draft-07/schema#",
    "components": {"schemas": schemas},
    "allOf": [{"$ref": f"#/components/schemas/{name}"}],
}
json.dump(document, sys.stdout, indent=1, sort_keys=True)
print()
PY
