#!/usr/bin/python3
"""Every object of every manifest under deploy/kubernetes is valid for Kubernetes 1.29.

Usage: kubernetes_manifests_test.py REPO_ROOT WHEEL_DIR

No API server is needed. Each object is validated against the strict JSON schemas
(unknown fields refused) of Kubernetes 1.29 that the kubernetes-validate wheel pinned in
tests/repo/kubernetes/requirements.txt carries: the wheel is only read (its sha256 is
checked again here), with Debian's python3-jsonschema and python3-yaml. Custom resources
(ObjectBucketClaim) are validated against the schemas in tests/repo/kubernetes/, written
from their CRDs. Beyond the schemas: each kustomization.yaml lists exactly the manifests
beside it (secret.example.yaml never), applies no Secret, every selector of a
Service, workload or NetworkPolicy matches pods of the manifests, resource quantities
parse, and every $(VAR) in a container's arguments is in its env.

Then every file of tests/repo/kubernetes/invalid/ must be refused, each for the
deliberate error its `# expect:` line names: a validator that refuses nothing, or
refuses for another reason, fails the test.
"""
import hashlib
import json
import os
import re
import sys
import warnings
import zipfile

import jsonschema
import yaml

KUBERNETES_VERSION = "v1.29.0"
DEFS_ID = "https://kubernetes.io/api/_definitions.json"
# The keys of a kustomization.yaml the manifests may use (kustomize's own schema is not
# in the wheel): a typo there would otherwise go unnoticed until `kubectl apply -k`.
KUSTOMIZATION_KEYS = {"apiVersion", "kind", "namespace", "labels", "resources", "images"}
# A resource.Quantity as Kubernetes parses it (apimachinery's quantity.go).
QUANTITY = re.compile(r"^[+-]?([0-9]+(\.[0-9]*)?|\.[0-9]+)([eE][+-]?[0-9]+|[KMGTPE]i|[numkMGTPE])?$")
# Kinds whose pods a selector may match, and where their pod template is.
WORKLOADS = {"Deployment", "StatefulSet", "DaemonSet", "ReplicaSet", "Job"}


class Schemas:
    """The strict schemas of one Kubernetes version, read from the pinned wheel."""

    def __init__(self, wheel_path, local_dir):
        self.zip = zipfile.ZipFile(wheel_path)
        self.prefix = "kubernetes_validate/kubernetes-json-schema/%s-local-strict/" % KUBERNETES_VERSION
        defs = json.loads(self.zip.read(self.prefix + "_definitions.json"))
        if defs.get("$id") != DEFS_ID:
            raise SystemExit("FAIL: the wheel's _definitions.json is not %s" % DEFS_ID)
        self.store = {DEFS_ID: defs}
        self.local = {}
        for name in sorted(os.listdir(local_dir)):
            if name.endswith(".json"):
                with open(os.path.join(local_dir, name)) as f:
                    schema = json.load(f)
                props = schema["properties"]
                self.local[(props["apiVersion"]["enum"][0], props["kind"]["enum"][0])] = schema
        self.cache = {}

    def schema_for(self, api_version, kind):
        """The schema of (apiVersion, kind), or None when neither source knows it."""
        if (api_version, kind) in self.local:
            return self.local[(api_version, kind)]
        # rbac.authorization.k8s.io/v1 -> rbac-v1; apps/v1 -> apps-v1; v1 -> v1
        group = re.sub(r"^([^./]*)(?:\.[^/]*)?/", r"\1-", api_version)
        path = "%s%s-%s.json" % (self.prefix, kind.lower(), group)
        if path not in self.cache:
            try:
                self.cache[path] = json.loads(self.zip.read(path))
            except KeyError:
                self.cache[path] = None
        return self.cache[path]

    def errors(self, obj):
        """Messages for what in obj its schema refuses."""
        api_version, kind = obj.get("apiVersion"), obj.get("kind")
        if not isinstance(api_version, str) or not isinstance(kind, str):
            return ["apiVersion and kind must be strings"]
        schema = self.schema_for(api_version, kind)
        if schema is None:
            return ["no schema for %s %s in Kubernetes %s or tests/repo/kubernetes/" %
                    (api_version, kind, KUBERNETES_VERSION)]
        # RefResolver is Debian 12's jsonschema's (4.10) way; newer ones warn but keep it.
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            resolver = jsonschema.RefResolver.from_schema(schema, store=self.store)
        validator = jsonschema.Draft202012Validator(schema, resolver=resolver)
        out = []
        for e in sorted(validator.iter_errors(obj), key=lambda e: list(map(str, e.absolute_path))):
            where = ".".join(str(p) for p in e.absolute_path) or "(top)"
            # oneOf/anyOf failures (IntOrString, Quantity) hide the reason in their context.
            detail = "; ".join(sorted({c.message for c in e.context})) if e.context else ""
            out.append("%s: %s%s" % (where, e.message, " (%s)" % detail if detail else ""))
        return out


def load_documents(path):
    """The non-empty YAML documents of a file, or a parse error."""
    with open(path) as f:
        try:
            return [d for d in yaml.safe_load_all(f) if d is not None], None
        except yaml.YAMLError as e:
            return [], "YAML: %s" % str(e).replace("\n", " ")


def name_of(obj):
    meta = obj.get("metadata") if isinstance(obj.get("metadata"), dict) else {}
    return "%s/%s" % (obj.get("kind"), meta.get("name"))


def pod_labels(objects):
    """Labels of every pod template among objects, with the workload that holds it."""
    out = []
    for obj in objects:
        if obj.get("kind") in WORKLOADS:
            template = (obj.get("spec") or {}).get("template") or {}
            out.append((name_of(obj), ((template.get("metadata") or {}).get("labels")) or {}))
    return out


def matches(selector, labels):
    return all(labels.get(k) == v for k, v in selector.items())


def selector_errors(objects):
    """Selectors that select no pod of these manifests: a Service or policy that misses."""
    pods = pod_labels(objects)
    out = []
    for obj in objects:
        kind, spec = obj.get("kind"), obj.get("spec") or {}
        if kind == "Service":
            selectors = [("spec.selector", spec.get("selector") or {})]
        elif kind in WORKLOADS:
            match = (spec.get("selector") or {}).get("matchLabels") or {}
            labels = ((spec.get("template") or {}).get("metadata") or {}).get("labels") or {}
            if not matches(match, labels):
                out.append("%s: spec.selector.matchLabels %s does not match its own pod template's labels" %
                           (name_of(obj), match))
            continue
        elif kind == "NetworkPolicy":
            selectors = [("spec.podSelector", (spec.get("podSelector") or {}).get("matchLabels") or {})]
            for i, rule in enumerate(spec.get("ingress") or []):
                for j, peer in enumerate(rule.get("from") or []):
                    if "podSelector" in peer and "namespaceSelector" not in peer:
                        selectors.append(("spec.ingress.%d.from.%d.podSelector" % (i, j),
                                          (peer["podSelector"] or {}).get("matchLabels") or {}))
        else:
            continue
        for where, selector in selectors:
            if selector and not any(matches(selector, labels) for _, labels in pods):
                out.append("%s: %s %s selects no pod of the manifests" % (name_of(obj), where, selector))
    return out


def containers_of(obj):
    """The containers and init containers of a workload's pod template."""
    pod = (((obj.get("spec") or {}).get("template") or {}).get("spec")) or {}
    return (pod.get("initContainers") or []) + (pod.get("containers") or [])


def quantity_errors(obj):
    """Resource quantities Kubernetes would refuse: the schemas take any string for them."""
    out = []
    amounts = []
    for c in containers_of(obj) if obj.get("kind") in WORKLOADS else []:
        for part in ("requests", "limits"):
            for name, value in ((c.get("resources") or {}).get(part) or {}).items():
                amounts.append(("%s resources.%s.%s" % (c.get("name"), part, name), value))
    for t in (obj.get("spec") or {}).get("volumeClaimTemplates") or []:
        for name, value in (((t.get("spec") or {}).get("resources") or {}).get("requests") or {}).items():
            amounts.append(("volumeClaimTemplates %s requests.%s" % ((t.get("metadata") or {}).get("name"), name), value))
    for v in (((obj.get("spec") or {}).get("template") or {}).get("spec") or {}).get("volumes") or []:
        if "sizeLimit" in (v.get("emptyDir") or {}):
            amounts.append(("volume %s emptyDir.sizeLimit" % v.get("name"), v["emptyDir"]["sizeLimit"]))
    for where, value in amounts:
        if not (isinstance(value, (int, float)) and not isinstance(value, bool)) and not QUANTITY.match(str(value)):
            out.append("%s: %s: %r is not a quantity" % (name_of(obj), where, value))
    return out


def env_reference_errors(obj):
    """$(VAR) in a container's command or args that its env does not define (kept verbatim then)."""
    out = []
    for c in containers_of(obj) if obj.get("kind") in WORKLOADS else []:
        if c.get("envFrom"):
            continue  # what envFrom brings is known only in the cluster
        defined = {e.get("name") for e in c.get("env") or []}
        for arg in (c.get("command") or []) + (c.get("args") or []):
            for var in re.findall(r"(?<!\$)\$\(([A-Za-z_][A-Za-z0-9_]*)\)", str(arg)):
                if var not in defined:
                    out.append("%s: container %s: $(%s) in its arguments is not in its env" %
                               (name_of(obj), c.get("name"), var))
    return out


def kustomization_errors(path, doc):
    """What is wrong with a kustomization.yaml, judged against the files beside it."""
    here = os.path.dirname(path)
    out = []
    if not isinstance(doc, dict):
        return ["%s: not a mapping" % path]
    if doc.get("apiVersion") != "kustomize.config.k8s.io/v1beta1" or doc.get("kind") != "Kustomization":
        out.append("%s: apiVersion/kind must be kustomize.config.k8s.io/v1beta1 Kustomization" % path)
    for key in sorted(set(doc) - KUSTOMIZATION_KEYS):
        out.append("%s: unknown key %r (known here: %s)" % (path, key, ", ".join(sorted(KUSTOMIZATION_KEYS))))
    listed = doc.get("resources") or []
    beside = sorted(n for n in os.listdir(here) if n.endswith((".yaml", ".yml")) and
                    n not in ("kustomization.yaml", "secret.example.yaml"))
    for name in listed:
        if not os.path.isfile(os.path.join(here, name)):
            out.append("%s: resource %s does not exist" % (path, name))
    if "secret.example.yaml" in listed:
        out.append("%s: secret.example.yaml holds placeholders and must not be applied" % path)
    for name in beside:
        if name not in listed:
            out.append("%s: %s is beside it but not in its resources" % (path, name))
    for name in listed:
        docs, _ = load_documents(os.path.join(here, name)) if os.path.isfile(os.path.join(here, name)) else ([], None)
        for obj in docs:
            if isinstance(obj, dict) and obj.get("kind") == "Secret":
                out.append("%s: %s applies %s: secrets are made by hand (docs/kubernetes.md)" %
                           (path, name, name_of(obj)))
    return out


def check_files(schemas, paths):
    """(number of objects, messages) for a set of manifest files judged together."""
    messages, objects = [], []
    for path in paths:
        docs, parse_error = load_documents(path)
        if parse_error:
            messages.append("%s: %s" % (path, parse_error))
            continue
        if os.path.basename(path) == "kustomization.yaml":
            messages += kustomization_errors(path, docs[0] if docs else None)
            continue
        for obj in docs:
            if not isinstance(obj, dict):
                messages.append("%s: a document that is not a mapping" % path)
                continue
            objects.append(obj)
            for m in schemas.errors(obj):
                messages.append("%s: %s: %s" % (path, name_of(obj), m))
            messages += ["%s: %s" % (path, m) for m in quantity_errors(obj) + env_reference_errors(obj)]
    messages += selector_errors(objects)
    return len(objects), messages


def main():
    if len(sys.argv) != 3:
        raise SystemExit(__doc__)
    repo, wheel_dir = sys.argv[1], sys.argv[2]
    fixtures = os.path.join(repo, "tests", "repo", "kubernetes")
    with open(os.path.join(fixtures, "requirements.txt")) as f:
        pin = re.search(r"^kubernetes-validate==(\S+) --hash=sha256:([0-9a-f]{64})$", f.read(), re.M)
    wheel = os.path.join(wheel_dir, "kubernetes_validate-%s-py3-none-any.whl" % pin.group(1))
    if not os.path.isfile(wheel):
        print("FAIL: %s is missing: scripts/install-deps.sh (make deps) downloads it" % wheel)
        return 1
    with open(wheel, "rb") as f:
        digest = hashlib.sha256(f.read()).hexdigest()
    if digest != pin.group(2):
        print("FAIL: %s has sha256 %s, not the pinned %s" % (wheel, digest, pin.group(2)))
        return 1
    schemas = Schemas(wheel, fixtures)

    deploy = os.path.join(repo, "deploy", "kubernetes")
    manifests = sorted(os.path.join(d, n) for d, _, names in os.walk(deploy) for n in names
                       if n.endswith((".yaml", ".yml")))
    count, messages = check_files(schemas, manifests)
    for m in messages:
        print("FAIL: " + m.replace(repo + os.sep, ""))
    if count == 0:
        messages.append("no objects")
        print("FAIL: no objects found under %s" % deploy)
    print("%d objects in %d files under deploy/kubernetes checked against Kubernetes %s (strict)" %
          (count, len(manifests), KUBERNETES_VERSION))

    invalid_dir = os.path.join(fixtures, "invalid")
    broken = sorted(os.path.join(invalid_dir, n) for n in os.listdir(invalid_dir) if n.endswith(".yaml"))
    accepted = 0
    for path in broken:
        with open(path) as f:
            expect = re.search(r"^# expect: (.+)$", f.read(), re.M)
        _, refusals = check_files(schemas, [path])
        hits = [r for r in refusals if expect and expect.group(1) in r]
        if hits:
            print("refused as it must be: %s" % hits[0].replace(repo + os.sep, ""))
        else:
            accepted += 1
            print("FAIL: %s was not refused for its deliberate error (its '# expect:' line); refusals: %s" %
                  (os.path.relpath(path, repo), refusals or "none"))
    if not broken:
        accepted += 1
        print("FAIL: no broken fixtures in %s" % invalid_dir)
    return 1 if messages or accepted else 0


if __name__ == "__main__":
    sys.exit(main())
