#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Checks the Kubernetes manifests of deploy/ against strict schemas of the API kinds they use.

Like `kubectl apply --validate=strict`, a field the schema does not know is an error, and so are a
missing required field and a value of the wrong type. The schemas below are written for gpuos from
the Go API types of Kubernetes (k8s.io/api: core/v1, apps/v1, rbac/v1, resource/v1; a field's json
tag gives its name, `omitempty` makes it optional). They cover the fields gpuos uses and the common
ones beside them, not every field of every kind: a field that is valid Kubernetes but unknown here
is refused too, and then belongs in the schema.

Beyond the shapes it checks what the API server, the kubelet or gpuos-dra would refuse later: names
(DNS-1123), selectors that match their pod template, volume mounts that name a volume, container
claims that name a pod claim, claim templates, device classes, ConfigMaps and ServiceAccounts that
exist among the manifests, the gpuos TenantConfig in opaque claim config (apiVersion gpuos.io/v1,
kind TenantConfig, known fields, types and ranges), CEL selectors that select driver gpuos.io, the
DaemonSets' host paths mounted where they are on the host (CDI specs name host paths) with the
interposer on one of them, hostPID, gpuosd's --config in its ConfigMap, gpuosd and gpuos-dra in
DaemonSets of their own (each restarts on its own), a priority class that exists (the system-*
classes only in kube-system), the Pod Security label "privileged" on a namespace whose pods are
privileged or use the host's pids, network or paths, and that each kustomization.yaml lists every
manifest beside it. With --gpuos-cli, gpuosd's config in the
ConfigMap gpuos-config must pass `gpuos config check`.

Then it proves it can fail: every field of every manifest is in turn misspelt, every required
field removed, every typed value replaced by one of another type, and a set of targeted mistakes
(dangling claim, volume, template and class names, a wrong TenantConfig) is made; each mutated set
must be refused with an error at the right place.

usage: manifest_schema.py [--deploy DIR] [--gpuos-cli PATH] [-v]
Exit status: 0 all good, 1 a manifest is invalid or a mutation was accepted, 2 usage/setup error.
"""

import argparse
import copy
import os
import re
import subprocess
import sys
import tempfile

try:
    import yaml
except ImportError:  # CI installs Debian's python3-yaml (.ci/run)
    print("manifest_schema.py: PyYAML is missing (Debian: apt-get install python3-yaml)", file=sys.stderr)
    sys.exit(2)


# ---------------------------------------------------------------------------------------------
# Names and values

DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")
LABEL_NAME = re.compile(r"^[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$")
PORT_NAME = re.compile(r"^[a-z0-9]([a-z0-9-]*[a-z0-9])?$")
ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
QUANTITY = re.compile(r"^[+-]?([0-9]+(\.[0-9]*)?|\.[0-9]+)([eE][+-]?[0-9]+|Ki|Mi|Gi|Ti|Pi|Ei|n|u|m|k|M|G|T|P|E)?$")
# TenantConfig sizes: a Kubernetes quantity with a byte suffix, or a gpuos size (docs/OPERATIONS.md).
SIZE = re.compile(r"^([0-9]+(\.[0-9]{1,6})?) ?([KMGTkmgt]?([iI]?[bB]|[iI])?|[bB])$")
SPACE_NAME = re.compile(r"^[A-Za-z0-9_.-]{1,32}$")


def dns_label(v):
    return None if len(v) <= 63 and DNS_LABEL.match(v) else "is not a DNS-1123 label (a-z, 0-9, '-', at most 63)"


def dns_subdomain(v):
    if len(v) <= 253 and DNS_SUBDOMAIN.match(v):
        return None
    return "is not a DNS-1123 subdomain (a-z, 0-9, '-', '.', at most 253)"


def path_segment(v):  # names of RBAC objects
    bad = not v or "/" in v or "%" in v or v in (".", "..")
    return "is not a valid name (no '/', '%', '.' or '..')" if bad else None


def qualified_name(v):  # label and annotation keys: [prefix/]name
    prefix, _, name = v.rpartition("/")
    if prefix and dns_subdomain(prefix):
        return "has a prefix that is not a DNS subdomain"
    if not (len(name) <= 63 and LABEL_NAME.match(name)):
        return "is not a qualified name ([prefix/]name, name at most 63 of A-Z a-z 0-9 - _ .)"
    return None


def label_value(v):
    return None if len(v) <= 63 and LABEL_VALUE.match(v) else "is not a label value (at most 63 of A-Z a-z 0-9 - _ .)"


def port_name(v):
    ok = len(v) <= 15 and PORT_NAME.match(v) and "--" not in v and re.search(r"[a-z]", v)
    return None if ok else "is not a port name (at most 15 of a-z 0-9 -, one letter at least)"


def env_name(v):
    return None if ENV_NAME.match(v) else "is not an environment variable name"


def absolute_path(v):
    return None if v.startswith("/") else "is not an absolute path"


def quantity(v):
    return None if QUANTITY.match(str(v)) else "is not a quantity (e.g. 100m, 128Mi, 2)"


# ---------------------------------------------------------------------------------------------
# Schema nodes. check() reports through ctx.error(path, message) and records what it saw in
# ctx.sites, from which the negative cases are made.

def type_name(v):
    if isinstance(v, bool):
        return "boolean"
    if isinstance(v, int):
        return "integer"
    if isinstance(v, float):
        return "number"
    if isinstance(v, str):
        return "string"
    if isinstance(v, list):
        return "list"
    if isinstance(v, dict):
        return "object"
    return "null" if v is None else type(v).__name__


class Schema:
    wrong_example = None  # a value of another type, for the negative cases; None: no such case

    def check(self, v, path, ctx):
        raise NotImplementedError


class Str(Schema):
    wrong_example = 7

    def __init__(self, enum=None, valid=None, max_len=None):
        self.enum, self.valid, self.max_len = enum, valid, max_len

    def check(self, v, path, ctx):
        ctx.sites.append(("value", path, self))
        if not isinstance(v, str):
            return ctx.error(path, f"expected a string, got {type_name(v)}")
        if self.enum is not None and v not in self.enum:
            return ctx.error(path, f"{v!r} is not one of {', '.join(self.enum)}")
        if self.max_len is not None and len(v) > self.max_len:
            return ctx.error(path, f"longer than {self.max_len} characters")
        if self.valid is not None:
            why = self.valid(v)
            if why:
                ctx.error(path, f"{v!r} {why}")


class Int(Schema):
    wrong_example = "7"

    def __init__(self, lo=None, hi=None):
        self.lo, self.hi = lo, hi

    def check(self, v, path, ctx):
        ctx.sites.append(("value", path, self))
        if isinstance(v, bool) or not isinstance(v, int):
            return ctx.error(path, f"expected an integer, got {type_name(v)}")
        if (self.lo is not None and v < self.lo) or (self.hi is not None and v > self.hi):
            ctx.error(path, f"{v} out of range {self.lo}..{self.hi}")


class Bool(Schema):
    wrong_example = "true"  # the usual mistake: a quoted boolean

    def check(self, v, path, ctx):
        ctx.sites.append(("value", path, self))
        if not isinstance(v, bool):
            ctx.error(path, f"expected true or false, got {type_name(v)}")


class IntOrStr(Schema):
    """intstr.IntOrString: 1 or "25%"."""
    wrong_example = True

    def check(self, v, path, ctx):
        ctx.sites.append(("value", path, self))
        if isinstance(v, bool) or not isinstance(v, (int, str)):
            ctx.error(path, f"expected an integer or a string, got {type_name(v)}")


class Quantity(Schema):
    """resource.Quantity: a string such as 128Mi, or a plain number."""
    wrong_example = [1]

    def check(self, v, path, ctx):
        ctx.sites.append(("value", path, self))
        if isinstance(v, bool) or not isinstance(v, (int, float, str)):
            return ctx.error(path, f"expected a quantity, got {type_name(v)}")
        why = quantity(v)
        if why:
            ctx.error(path, f"{v!r} {why}")


class Any(Schema):
    def check(self, v, path, ctx):
        pass


class List(Schema):
    wrong_example = {"x": 1}

    def __init__(self, item, min_items=0):
        self.item, self.min_items = item, min_items

    def check(self, v, path, ctx):
        ctx.sites.append(("value", path, self))
        if not isinstance(v, list):
            return ctx.error(path, f"expected a list, got {type_name(v)}")
        if len(v) < self.min_items:
            ctx.error(path, f"needs at least {self.min_items} item(s)")
        for i, item in enumerate(v):
            self.item.check(item, path + (i,), ctx)


class Map(Schema):
    """A map with free keys (labels, data, resource lists)."""
    wrong_example = ["x"]

    def __init__(self, value, key=None):
        self.value, self.key = value, key

    def check(self, v, path, ctx):
        ctx.sites.append(("value", path, self))
        if not isinstance(v, dict):
            return ctx.error(path, f"expected a map, got {type_name(v)}")
        for k, item in v.items():
            if not isinstance(k, str):
                ctx.error(path, f"key {k!r} is not a string")
                continue
            if self.key is not None:
                why = self.key(k)
                if why:
                    ctx.error(path, f"key {k!r} {why}")
            self.value.check(item, path + (k,), ctx)


class F:
    """A field of an Obj: its schema, and whether it must be there."""

    def __init__(self, schema, required=False):
        self.schema, self.required = schema, required


def req(schema):
    return F(schema, required=True)


class Obj(Schema):
    """A struct: only the named fields, required ones present. one_of: groups of fields of which
    exactly one must be set; at_most_one: groups of which no two may be set."""
    wrong_example = ["x"]

    def __init__(self, fields, one_of=(), at_most_one=()):
        self.fields = {k: (f if isinstance(f, F) else F(f)) for k, f in fields.items()}
        self.one_of, self.at_most_one = one_of, at_most_one

    def extend(self, more, one_of=None):
        fields = dict(self.fields)
        fields.update({k: (f if isinstance(f, F) else F(f)) for k, f in more.items()})
        return Obj(fields, self.one_of if one_of is None else one_of, self.at_most_one)

    def check(self, v, path, ctx):
        ctx.sites.append(("value", path, self))
        if not isinstance(v, dict):
            return ctx.error(path, f"expected an object, got {type_name(v)}")
        ctx.sites.append(("object", path, self))
        for k, item in v.items():
            f = self.fields.get(k)
            if f is None:
                ctx.error(path, f"unknown field {k!r}")
                continue
            if f.required:
                ctx.sites.append(("required", path + (k,), self))
            f.schema.check(item, path + (k,), ctx)
        for k, f in self.fields.items():
            if f.required and k not in v:
                ctx.error(path, f"missing required field {k!r}")
        for group in self.one_of:
            present = [k for k in group if v.get(k) is not None]
            if len(present) != 1:
                ctx.error(path, f"exactly one of {', '.join(group)} must be set, found {len(present)}")
        for group in self.at_most_one:
            present = [k for k in group if v.get(k) is not None]
            if len(present) > 1:
                ctx.error(path, f"only one of {', '.join(present)} may be set")


# ---------------------------------------------------------------------------------------------
# The kinds gpuos uses (field names from k8s.io/api json tags)

def object_meta(name_check, name_required=True):
    return Obj({
        "name": F(Str(valid=name_check), required=name_required),
        "generateName": Str(),
        "namespace": Str(valid=dns_label),
        "labels": Map(Str(valid=label_value), key=qualified_name),
        "annotations": Map(Str(), key=qualified_name),
        "finalizers": List(Str()),
    })


TEMPLATE_META = Obj({
    "name": Str(valid=dns_subdomain),
    "labels": Map(Str(valid=label_value), key=qualified_name),
    "annotations": Map(Str(), key=qualified_name),
})

LABEL_SELECTOR = Obj({
    "matchLabels": Map(Str(valid=label_value), key=qualified_name),
    "matchExpressions": List(Obj({
        "key": req(Str(valid=qualified_name)),
        "operator": req(Str(enum=["In", "NotIn", "Exists", "DoesNotExist"])),
        "values": List(Str()),
    })),
})

KEY_TO_PATH = Obj({"key": req(Str()), "path": req(Str()), "mode": Int(0, 0o777)})

VOLUME = Obj({
    "name": req(Str(valid=dns_label)),
    "hostPath": Obj({
        "path": req(Str(valid=absolute_path)),
        "type": Str(enum=["", "DirectoryOrCreate", "Directory", "FileOrCreate", "File", "Socket",
                          "CharDevice", "BlockDevice"]),
    }),
    "emptyDir": Obj({"medium": Str(enum=["", "Memory"]), "sizeLimit": Quantity()}),
    "configMap": Obj({
        "name": Str(valid=dns_subdomain), "items": List(KEY_TO_PATH), "defaultMode": Int(0, 0o777),
        "optional": Bool(),
    }),
    "secret": Obj({
        "secretName": Str(valid=dns_subdomain), "items": List(KEY_TO_PATH), "defaultMode": Int(0, 0o777),
        "optional": Bool(),
    }),
    "persistentVolumeClaim": Obj({"claimName": req(Str(valid=dns_subdomain)), "readOnly": Bool()}),
}, one_of=[("hostPath", "emptyDir", "configMap", "secret", "persistentVolumeClaim")])

VOLUME_MOUNT = Obj({
    "name": req(Str()),
    "mountPath": req(Str(valid=absolute_path)),
    "readOnly": Bool(),
    "recursiveReadOnly": Str(enum=["Disabled", "IfPossible", "Enabled"]),
    "subPath": Str(),
    "subPathExpr": Str(),
    "mountPropagation": Str(enum=["None", "HostToContainer", "Bidirectional"]),
}, at_most_one=[("subPath", "subPathExpr")])

KEY_SELECTOR = Obj({"name": Str(), "key": req(Str()), "optional": Bool()})

ENV_VAR = Obj({
    "name": req(Str(valid=env_name)),
    "value": Str(),
    "valueFrom": Obj({
        "fieldRef": Obj({"apiVersion": Str(), "fieldPath": req(Str())}),
        "resourceFieldRef": Obj({"containerName": Str(), "resource": req(Str()), "divisor": Quantity()}),
        "configMapKeyRef": KEY_SELECTOR,
        "secretKeyRef": KEY_SELECTOR,
    }, one_of=[("fieldRef", "resourceFieldRef", "configMapKeyRef", "secretKeyRef")]),
}, at_most_one=[("value", "valueFrom")])

CONTAINER_PORT = Obj({
    "name": Str(valid=port_name),
    "containerPort": req(Int(1, 65535)),
    "hostPort": Int(1, 65535),
    "hostIP": Str(),
    "protocol": Str(enum=["TCP", "UDP", "SCTP"]),
})

RESOURCES = Obj({
    "limits": Map(Quantity()),
    "requests": Map(Quantity()),
    # DRA: the pod claims (spec.resourceClaims[].name) this container uses, optionally one request.
    "claims": List(Obj({"name": req(Str(valid=dns_label)), "request": Str()})),
})

PROBE = Obj({
    "exec": Obj({"command": List(Str())}),
    "httpGet": Obj({"path": Str(), "port": req(IntOrStr()), "host": Str(), "scheme": Str(enum=["HTTP", "HTTPS"]),
                    "httpHeaders": List(Obj({"name": req(Str()), "value": req(Str())}))}),
    "tcpSocket": Obj({"port": req(IntOrStr()), "host": Str()}),
    "grpc": Obj({"port": req(Int(1, 65535)), "service": Str()}),
    "initialDelaySeconds": Int(0), "timeoutSeconds": Int(1), "periodSeconds": Int(1),
    "successThreshold": Int(1), "failureThreshold": Int(1), "terminationGracePeriodSeconds": Int(1),
}, one_of=[("exec", "httpGet", "tcpSocket", "grpc")])

SECCOMP = Obj({"type": req(Str(enum=["RuntimeDefault", "Unconfined", "Localhost"])), "localhostProfile": Str()})

SECURITY_CONTEXT = Obj({
    "privileged": Bool(),
    "capabilities": Obj({"add": List(Str()), "drop": List(Str())}),
    "runAsUser": Int(0), "runAsGroup": Int(0), "runAsNonRoot": Bool(),
    "readOnlyRootFilesystem": Bool(), "allowPrivilegeEscalation": Bool(),
    "seccompProfile": SECCOMP,
})

CONTAINER = Obj({
    "name": req(Str(valid=dns_label)),
    "image": Str(),
    "imagePullPolicy": Str(enum=["Always", "IfNotPresent", "Never"]),
    "command": List(Str()),
    "args": List(Str()),
    "workingDir": Str(),
    "ports": List(CONTAINER_PORT),
    "env": List(ENV_VAR),
    "envFrom": List(Obj({"prefix": Str(), "configMapRef": Obj({"name": Str(), "optional": Bool()}),
                         "secretRef": Obj({"name": Str(), "optional": Bool()})})),
    "resources": RESOURCES,
    "volumeMounts": List(VOLUME_MOUNT),
    "livenessProbe": PROBE, "readinessProbe": PROBE, "startupProbe": PROBE,
    "securityContext": SECURITY_CONTEXT,
    "terminationMessagePath": Str(),
    "terminationMessagePolicy": Str(enum=["File", "FallbackToLogsOnError"]),
    "stdin": Bool(), "tty": Bool(),
})

TOLERATION = Obj({
    "key": Str(), "operator": Str(enum=["Exists", "Equal"]), "value": Str(),
    "effect": Str(enum=["NoSchedule", "PreferNoSchedule", "NoExecute"]), "tolerationSeconds": Int(),
})

POD_RESOURCE_CLAIM = Obj({
    "name": req(Str(valid=dns_label)),
    "resourceClaimName": Str(valid=dns_subdomain),
    "resourceClaimTemplateName": Str(valid=dns_subdomain),
}, one_of=[("resourceClaimName", "resourceClaimTemplateName")])

POD_SPEC = Obj({
    "containers": req(List(CONTAINER, min_items=1)),
    "initContainers": List(CONTAINER),
    "volumes": List(VOLUME),
    "restartPolicy": Str(enum=["Always", "OnFailure", "Never"]),
    "terminationGracePeriodSeconds": Int(0),
    "dnsPolicy": Str(enum=["ClusterFirst", "ClusterFirstWithHostNet", "Default", "None"]),
    "nodeSelector": Map(Str(), key=qualified_name),
    "nodeName": Str(),
    "serviceAccountName": Str(valid=dns_subdomain),
    "automountServiceAccountToken": Bool(),
    "hostNetwork": Bool(), "hostPID": Bool(), "hostIPC": Bool(),
    "securityContext": Obj({"runAsUser": Int(0), "runAsGroup": Int(0), "runAsNonRoot": Bool(),
                            "fsGroup": Int(0), "supplementalGroups": List(Int(0)), "seccompProfile": SECCOMP}),
    "imagePullSecrets": List(Obj({"name": req(Str())})),
    "tolerations": List(TOLERATION),
    "priorityClassName": Str(valid=dns_subdomain),
    "runtimeClassName": Str(valid=dns_subdomain),
    "resourceClaims": List(POD_RESOURCE_CLAIM),
})

POD_TEMPLATE = Obj({"metadata": TEMPLATE_META, "spec": req(POD_SPEC)})

ROLLING_UPDATE = Obj({"maxUnavailable": IntOrStr(), "maxSurge": IntOrStr()})

DAEMONSET_SPEC = Obj({
    "selector": req(LABEL_SELECTOR),
    "template": req(POD_TEMPLATE),
    "updateStrategy": Obj({"type": Str(enum=["RollingUpdate", "OnDelete"]), "rollingUpdate": ROLLING_UPDATE}),
    "minReadySeconds": Int(0),
    "revisionHistoryLimit": Int(0),
})

DEPLOYMENT_SPEC = Obj({
    "replicas": Int(0),
    "selector": req(LABEL_SELECTOR),
    "template": req(POD_TEMPLATE),
    "strategy": Obj({"type": Str(enum=["RollingUpdate", "Recreate"]), "rollingUpdate": ROLLING_UPDATE}),
    "minReadySeconds": Int(0),
    "revisionHistoryLimit": Int(0),
    "progressDeadlineSeconds": Int(1),
    "paused": Bool(),
})

RBAC_VERBS = ["get", "list", "watch", "create", "update", "patch", "delete", "deletecollection", "*",
              "use", "bind", "escalate", "impersonate", "approve", "sign"]

POLICY_RULE = Obj({
    "verbs": req(List(Str(enum=RBAC_VERBS), min_items=1)),
    "apiGroups": List(Str()),
    "resources": List(Str()),
    "resourceNames": List(Str()),
    "nonResourceURLs": List(Str()),
})

SUBJECT = Obj({
    "kind": req(Str(enum=["ServiceAccount", "User", "Group"])),
    "apiGroup": Str(),
    "name": req(Str()),
    "namespace": Str(valid=dns_label),
})

ROLE_REF = Obj({
    "apiGroup": req(Str(enum=["rbac.authorization.k8s.io"])),
    "kind": req(Str(enum=["ClusterRole", "Role"])),
    "name": req(Str(valid=path_segment)),
})

# resource.k8s.io/v1 (DRA)
DEVICE_SELECTOR = Obj({"cel": req(Obj({"expression": req(Str(max_len=10 * 1024))}))})

TENANT_CONFIG_FIELDS = ["apiVersion", "kind", "class", "priority", "weight", "mem", "borrow", "space", "sms",
                        "maxSlowdown"]


class Size(Schema):
    """A TenantConfig size: a positive number of bytes, or a string such as 40Gi or 512MiB."""
    wrong_example = True

    def check(self, v, path, ctx):
        ctx.sites.append(("value", path, self))
        if isinstance(v, bool) or not isinstance(v, (int, str)):
            return ctx.error(path, f"expected a size (40Gi, 512Mi, bytes), got {type_name(v)}")
        if isinstance(v, int):
            if v <= 0:
                ctx.error(path, f"{v} is not a positive number of bytes")
            return
        m = SIZE.match(v)
        if not m or float(m.group(1)) <= 0:
            ctx.error(path, f"{v!r} is not a size (e.g. 40Gi, 512Mi, a number of bytes)")


class Slowdown(Schema):
    """maxSlowdown: "1.25" or 1.25, from 1.001 to 100."""
    wrong_example = True

    def check(self, v, path, ctx):
        ctx.sites.append(("value", path, self))
        if isinstance(v, bool) or not isinstance(v, (int, float, str)):
            return ctx.error(path, f"expected a slowdown such as \"1.25\", got {type_name(v)}")
        try:
            x = float(v)
        except ValueError:
            return ctx.error(path, f"{v!r} is not a number")
        if not 1.001 <= x <= 100:
            ctx.error(path, f"{v!r} is not a slowdown from 1.001 to 100")


# gpuos.io/v1 TenantConfig: the parameters of opaque config for driver gpuos.io (dra_design.md).
TENANT_CONFIG = Obj({
    "apiVersion": req(Str(enum=["gpuos.io/v1"])),
    "kind": req(Str(enum=["TenantConfig"])),
    "class": Str(enum=["guaranteed", "best-effort"]),
    "priority": Int(-1000, 1000),
    "weight": Int(1, 10000),
    "mem": Size(),
    "borrow": Size(),
    "space": Str(valid=lambda v: None if SPACE_NAME.match(v) else "is not a domain name ([A-Za-z0-9_.-]{1,32})"),
    "sms": Int(1, 4096),
    "maxSlowdown": Slowdown(),
})


class Opaque(Schema):
    """OpaqueDeviceConfiguration: parameters are the driver's; gpuos.io's are a TenantConfig."""
    wrong_example = ["x"]
    shape = Obj({"driver": req(Str(valid=dns_subdomain, max_len=63)), "parameters": req(Any())})

    def check(self, v, path, ctx):
        self.shape.check(v, path, ctx)
        if isinstance(v, dict) and v.get("driver") == "gpuos.io" and "parameters" in v:
            p = v["parameters"]
            TENANT_CONFIG.check(p, path + ("parameters",), ctx)
            if isinstance(p, dict):
                if "borrow" in p and "mem" not in p:
                    ctx.error(path + ("parameters",), "borrow needs mem")
                if "sms" in p and "space" not in p:
                    ctx.error(path + ("parameters",), "sms needs space")
                if "maxSlowdown" in p and p.get("class") == "best-effort":
                    ctx.error(path + ("parameters",), "maxSlowdown is for guaranteed tenants only")


DEVICE_CONFIG = Obj({"requests": List(Str()), "opaque": req(Opaque())})

DEVICE_TOLERATION = Obj({
    "key": Str(), "operator": Str(enum=["Exists", "Equal"]), "value": Str(),
    "effect": Str(enum=["None", "NoSchedule", "NoExecute"]), "tolerationSeconds": Int(),
})

EXACT_REQUEST = Obj({
    "deviceClassName": req(Str(valid=dns_subdomain)),
    "selectors": List(DEVICE_SELECTOR),
    "allocationMode": Str(enum=["ExactCount", "All"]),
    "count": Int(1),
    "adminAccess": Bool(),
    "tolerations": List(DEVICE_TOLERATION),
    "capacity": Obj({"requests": Map(Quantity())}),
})

DEVICE_REQUEST = Obj({
    "name": req(Str(valid=dns_label)),
    "exactly": EXACT_REQUEST,
    "firstAvailable": List(EXACT_REQUEST.extend({"name": req(Str(valid=dns_label))}), min_items=1),
}, one_of=[("exactly", "firstAvailable")])

RESOURCE_CLAIM_SPEC = Obj({
    "devices": req(Obj({
        "requests": List(DEVICE_REQUEST),
        "constraints": List(Obj({"requests": List(Str()), "matchAttribute": Str(), "distinctAttribute": Str()})),
        "config": List(DEVICE_CONFIG),
    })),
})


def top(meta, **fields):
    return Obj(dict({"apiVersion": req(Str()), "kind": req(Str()), "metadata": req(meta)}, **fields))


# (apiVersion, kind) -> (schema, namespaced)
KINDS = {
    ("v1", "Namespace"): (top(object_meta(dns_label), spec=Obj({"finalizers": List(Str())})), False),
    ("v1", "ServiceAccount"): (top(object_meta(dns_subdomain), automountServiceAccountToken=Bool(),
                                   imagePullSecrets=List(Obj({"name": req(Str())}))), True),
    ("v1", "ConfigMap"): (top(object_meta(dns_subdomain), data=Map(Str()), binaryData=Map(Str()),
                              immutable=Bool()), True),
    ("rbac.authorization.k8s.io/v1", "ClusterRole"): (top(object_meta(path_segment),
                                                          rules=req(List(POLICY_RULE))), False),
    ("rbac.authorization.k8s.io/v1", "ClusterRoleBinding"): (top(object_meta(path_segment),
                                                                 subjects=List(SUBJECT), roleRef=req(ROLE_REF)), False),
    ("scheduling.k8s.io/v1", "PriorityClass"): (top(object_meta(dns_subdomain), value=req(Int(-2147483648, 1000000000)),
                                                    globalDefault=Bool(), description=Str(),
                                                    preemptionPolicy=Str(enum=["PreemptLowerPriority", "Never"])),
                                                False),
    ("apps/v1", "DaemonSet"): (top(object_meta(dns_subdomain), spec=req(DAEMONSET_SPEC)), True),
    ("apps/v1", "Deployment"): (top(object_meta(dns_subdomain), spec=req(DEPLOYMENT_SPEC)), True),
    ("resource.k8s.io/v1", "DeviceClass"): (top(object_meta(dns_subdomain), spec=req(Obj({
        "selectors": List(DEVICE_SELECTOR),
        "config": List(Obj({"opaque": req(Opaque())})),
        "extendedResourceName": Str(),
    }))), False),
    ("resource.k8s.io/v1", "ResourceClaimTemplate"): (top(object_meta(dns_subdomain), spec=req(Obj({
        "metadata": TEMPLATE_META,
        "spec": req(RESOURCE_CLAIM_SPEC),
    }))), True),
}

KUSTOMIZATION = Obj({
    "apiVersion": req(Str(enum=["kustomize.config.k8s.io/v1beta1"])),
    "kind": req(Str(enum=["Kustomization"])),
    "resources": req(List(Str(), min_items=1)),
    "namespace": Str(valid=dns_label),
    "images": List(Obj({"name": req(Str()), "newName": Str(), "newTag": Str(), "digest": Str()})),
})


# ---------------------------------------------------------------------------------------------
# Validation of a set of documents

class Doc:
    def __init__(self, file, index, body):
        self.file, self.index, self.body = file, index, body

    def label(self):
        b = self.body if isinstance(self.body, dict) else {}
        meta = b.get("metadata") if isinstance(b.get("metadata"), dict) else {}
        name = meta.get("name", "?")
        ns = meta.get("namespace")
        return f"{self.file}#{self.index} {b.get('kind', '?')} {ns + '/' if isinstance(ns, str) else ''}{name}"


def fmt_path(path):
    out = ""
    for p in path:
        out += f"[{p}]" if isinstance(p, int) else (("." if out else "") + str(p))
    return out or "(document)"


class Ctx:
    def __init__(self, doc):
        self.doc, self.errors, self.sites = doc, [], []

    def error(self, path, msg):
        self.errors.append((self.doc, tuple(path), msg))


def g(v, *keys):
    """v[k1][k2]... or None where the shape does not allow it (the schema reports shapes)."""
    for k in keys:
        if isinstance(k, int):
            if not isinstance(v, list) or k >= len(v):
                return None
        elif not isinstance(v, dict):
            return None
        v = v[k] if (isinstance(k, int) or k in v) else None
    return v


def items(v, *keys):
    """The dict items of the list at v.keys..., with their indices."""
    lst = g(v, *keys)
    return [(i, x) for i, x in enumerate(lst) if isinstance(x, dict)] if isinstance(lst, list) else []


def s(v):
    return v if isinstance(v, str) else None


class Index:
    """What the set of manifests defines, for cross-references: (kind, namespace, name)."""

    def __init__(self, docs):
        self.objects = {}
        for d in docs:
            b = d.body
            kind, name = s(g(b, "kind")), s(g(b, "metadata", "name"))
            if kind and name:
                self.objects.setdefault((kind, s(g(b, "metadata", "namespace")), name), []).append(d)

    def has(self, kind, ns, name):
        return (kind, ns, name) in self.objects

    def get(self, kind, ns, name):
        found = self.objects.get((kind, ns, name))
        return found[0].body if found else None


def check_pod(pod, path, ns, index, ctx, hostpath_same=False):
    """Cross-references inside a pod spec and to the other manifests."""
    volumes = {}
    for i, v in items(pod, "volumes"):
        name = s(v.get("name"))
        if name in volumes:
            ctx.error(path + ("volumes", i, "name"), f"volume {name!r} defined twice")
        volumes[name] = v
        cm = s(g(v, "configMap", "name"))
        if cm and not g(v, "configMap", "optional") and not index.has("ConfigMap", ns, cm):
            ctx.error(path + ("volumes", i, "configMap", "name"), f"no ConfigMap {cm!r} in namespace {ns}")
    claims = {s(c.get("name")) for _, c in items(pod, "resourceClaims")}
    for i, c in items(pod, "resourceClaims"):
        t = s(c.get("resourceClaimTemplateName"))
        if t and not index.has("ResourceClaimTemplate", ns, t):
            ctx.error(path + ("resourceClaims", i, "resourceClaimTemplateName"),
                      f"no ResourceClaimTemplate {t!r} among the manifests")
    pc = s(pod.get("priorityClassName"))
    if pc in ("system-node-critical", "system-cluster-critical"):
        if ns != "kube-system":
            ctx.error(path + ("priorityClassName",), f"{pc} is for kube-system only (the API server refuses it in {ns}): "
                                                     "use a PriorityClass of your own")
    elif pc and not index.has("PriorityClass", None, pc):
        ctx.error(path + ("priorityClassName",), f"no PriorityClass {pc!r} among the manifests")
    host_access = [f for f in ("hostPID", "hostNetwork", "hostIPC") if pod.get(f) is True]
    host_access += [f"volume {s(v.get('name'))} (hostPath)" for _, v in items(pod, "volumes") if g(v, "hostPath")]
    host_access += [f"container {s(c.get('name'))} (privileged)" for group in ("initContainers", "containers")
                    for _, c in items(pod, group) if g(c, "securityContext", "privileged") is True]
    namespace = index.get("Namespace", None, ns)
    if host_access and namespace is not None:
        level = g(namespace, "metadata", "labels", "pod-security.kubernetes.io/enforce")
        if level != "privileged":
            ctx.error(path, f"namespace {ns} needs the label pod-security.kubernetes.io/enforce: privileged "
                            f"(it is {level!r}): its pods use " + ", ".join(host_access))
    sa = s(pod.get("serviceAccountName"))
    if sa and sa != "default" and not index.has("ServiceAccount", ns, sa):
        ctx.error(path + ("serviceAccountName",), f"no ServiceAccount {sa!r} in namespace {ns}")
    seen = set()
    for group in ("initContainers", "containers"):
        for i, c in items(pod, group):
            cpath = path + (group, i)
            name = s(c.get("name"))
            if name in seen:
                ctx.error(cpath + ("name",), f"container name {name!r} used twice")
            seen.add(name)
            mount_paths = set()
            for j, m in items(c, "volumeMounts"):
                vname = s(m.get("name"))
                if vname not in volumes:
                    ctx.error(cpath + ("volumeMounts", j, "name"), f"no volume {vname!r} in the pod")
                mp = s(m.get("mountPath"))
                if mp in mount_paths:
                    ctx.error(cpath + ("volumeMounts", j, "mountPath"), f"{mp} mounted twice")
                mount_paths.add(mp)
                host = s(g(volumes.get(vname), "hostPath", "path"))
                if hostpath_same and host and mp and host.rstrip("/") != mp.rstrip("/"):
                    ctx.error(cpath + ("volumeMounts", j, "mountPath"),
                              f"hostPath {host} mounted at {mp}: CDI specs name host paths, mount it at the same path")
            for j, rc in items(c, "resources", "claims"):
                cname = s(rc.get("name"))
                if cname not in claims:
                    ctx.error(cpath + ("resources", "claims", j, "name"),
                              f"no claim {cname!r} in the pod's resourceClaims")
            defined = {s(e.get("name")) for _, e in items(c, "env")}
            for field in ("command", "args"):
                for j, arg in enumerate(g(c, field) or []):
                    refs = re.findall(r"(?<!\$)\$\(([A-Za-z_][A-Za-z0-9_]*)\)", arg if isinstance(arg, str) else "")
                    for ref in refs:
                        if ref not in defined:
                            ctx.error(cpath + (field, j), f"$({ref}) is not an env variable of the container")


def str_list(v):
    return [x for x in v if isinstance(x, str)] if isinstance(v, list) else []


def flag_value(args, flag):
    """The value after `flag` (or of `flag=VALUE`) in a list of arguments, else None."""
    args = str_list(args)
    for i, a in enumerate(args):
        if a == flag and i + 1 < len(args):
            return args[i + 1]
        if a.startswith(flag + "="):
            return a[len(flag) + 1:]
    return None


def host_mount_of(pod, container, file_path):
    """The hostPath volume a container sees file_path through, or None."""
    volumes = {s(v.get("name")): v for _, v in items(pod, "volumes")}
    for _, m in items(container, "volumeMounts"):
        mp = (s(m.get("mountPath")) or "").rstrip("/")
        if mp and (file_path == mp or file_path.startswith(mp + "/")) and g(volumes.get(s(m.get("name"))), "hostPath"):
            return m
    return None


def check_gpuos_daemonset(name, pod, path, ctx):
    """What gpuos-dra and gpuosd need from their containers (deploy/daemonset.yaml): each in a
    DaemonSet of its own name, so that either restarts (and updates) without the other."""
    containers = {s(c.get("name")): (i, c) for i, c in items(pod, "containers")}
    if name not in containers:
        ctx.error(path + ("containers",), f"no container {name!r}")
    for other in {"gpuosd", "gpuos-dra"} - {name}:
        if other in containers:
            ctx.error(path + ("containers", containers[other][0]),
                      f"{other} in the pod of {name}: give it a DaemonSet of its own (they restart independently)")
    if name == "gpuosd" and not pod.get("hostPID"):
        ctx.error(path, "gpuosd needs hostPID: true (tenants' host pids, pidfds, /proc/<pid>/cgroup)")
    if "gpuos-dra" in containers:
        i, c = containers["gpuos-dra"]
        args = str_list(g(c, "command")) + str_list(g(c, "args"))
        if flag_value(args, "--node-name") is None:
            ctx.error(path + ("containers", i), "gpuos-dra needs --node-name")
        lib = flag_value(args, "--interposer") or "/usr/lib/gpuos/libgpuos.so"
        if not host_mount_of(pod, c, lib):
            ctx.error(path + ("containers", i), f"--interposer {lib} is not on a host path mounted in gpuos-dra: "
                                                "CDI specs bind it from the host")
    if "gpuosd" in containers:
        i, c = containers["gpuosd"]
        args = str_list(g(c, "command")) + str_list(g(c, "args"))
        config = flag_value(args, "--config")
        volumes = {s(v.get("name")): v for _, v in items(pod, "volumes")}
        mounted = any(g(volumes.get(s(m.get("name"))), "configMap") and config
                      and config.startswith((s(m.get("mountPath")) or "").rstrip("/") + "/")
                      for _, m in items(c, "volumeMounts"))
        if not mounted:
            ctx.error(path + ("containers", i), f"gpuosd --config {config} is not in a mounted ConfigMap")


def check_workload(b, index, ctx):
    ns = s(g(b, "metadata", "namespace"))
    match = g(b, "spec", "selector", "matchLabels")
    labels = g(b, "spec", "template", "metadata", "labels")
    if isinstance(match, dict):
        for k, v in match.items():
            if not isinstance(labels, dict) or labels.get(k) != v:
                ctx.error(("spec", "selector", "matchLabels", k), "does not match the pod template's labels")
    pod = g(b, "spec", "template", "spec")
    if isinstance(pod, dict):
        # gpuos's DaemonSets: CDI specs name host paths that the runtime reads on the host.
        name = s(g(b, "metadata", "name"))
        hostpath_same = b.get("kind") == "DaemonSet" and name in ("gpuosd", "gpuos-dra")
        check_pod(pod, ("spec", "template", "spec"), ns, index, ctx, hostpath_same)
        if hostpath_same:
            check_gpuos_daemonset(name, pod, ("spec", "template", "spec"), ctx)


def device_class_of(name):
    """The gpuos class a DeviceClass name stands for: gpuos-<class>.gpuos.io."""
    m = re.match(r"^gpuos-(guaranteed|best-effort)\.gpuos\.io$", name or "")
    return m.group(1) if m else None


def check_device_class(b, index, ctx):
    name = s(g(b, "metadata", "name"))
    cls = device_class_of(name)
    sels = items(b, "spec", "selectors")
    if not sels:
        ctx.error(("spec",), "a gpuos DeviceClass needs a selector for driver gpuos.io")
    for i, sel in sels:
        expr = s(g(sel, "cel", "expression")) or ""
        p = ("spec", "selectors", i, "cel", "expression")
        if not re.search(r'device\.driver\s*==\s*"gpuos\.io"', expr):
            ctx.error(p, 'does not select device.driver == "gpuos.io"')
        if cls and not re.search(r'\.class\s*==\s*"' + re.escape(cls) + '"', expr):
            ctx.error(p, f'class {name} does not select attribute class == "{cls}"')
        if expr.count("(") != expr.count(")") or expr.count('"') % 2:
            ctx.error(p, "unbalanced parentheses or quotes")


def check_claim_template(b, index, ctx):
    base = ("spec", "spec", "devices")
    requests = {}
    for i, r in items(b, *base, "requests"):
        name = s(r.get("name"))
        if name in requests:
            ctx.error(base + ("requests", i, "name"), f"request {name!r} named twice")
        dc = s(g(r, "exactly", "deviceClassName"))
        requests[name] = dc
        if dc and not index.has("DeviceClass", None, dc):
            ctx.error(base + ("requests", i, "exactly", "deviceClassName"),
                      f"no DeviceClass {dc!r} among the manifests")
    for i, c in items(b, *base, "config"):
        names = g(c, "requests") or list(requests)
        for j, rn in enumerate(g(c, "requests") or []):
            if rn not in requests:
                ctx.error(base + ("config", i, "requests", j), f"no request {rn!r} in the claim")
        params = g(c, "opaque", "parameters")
        cls = s(g(params, "class"))
        if s(g(c, "opaque", "driver")) == "gpuos.io" and cls:
            for rn in names:
                dev_cls = device_class_of(requests.get(rn))
                if dev_cls and dev_cls != cls:
                    ctx.error(base + ("config", i, "opaque", "parameters", "class"),
                              f"asks class {cls} but request {rn!r} gets a {dev_cls} share")


def check_rbac_binding(b, index, ctx):
    ref = s(g(b, "roleRef", "name"))
    if s(g(b, "roleRef", "kind")) == "ClusterRole" and ref and not index.has("ClusterRole", None, ref):
        ctx.error(("roleRef", "name"), f"no ClusterRole {ref!r} among the manifests")
    for i, sub in items(b, "subjects"):
        if sub.get("kind") == "ServiceAccount":
            ns = s(sub.get("namespace"))
            if not ns:
                ctx.error(("subjects", i), "a ServiceAccount subject needs its namespace")
            elif not index.has("ServiceAccount", ns, s(sub.get("name"))):
                ctx.error(("subjects", i, "name"), f"no ServiceAccount {sub.get('name')!r} in namespace {ns}")


def check_config_map(b, index, ctx, gpuos_cli):
    if s(g(b, "metadata", "name")) != "gpuos-config":
        return
    toml = g(b, "data", "gpuos.toml")
    if not isinstance(toml, str):
        return ctx.error(("data",), "gpuos-config needs the key gpuos.toml (gpuosd --config /etc/gpuos/gpuos.toml)")
    if gpuos_cli:
        with tempfile.NamedTemporaryFile("w", suffix=".toml") as f:
            f.write(toml)
            f.flush()
            r = subprocess.run([gpuos_cli, "config", "check", f.name], capture_output=True, text=True)
        if r.returncode != 0:
            ctx.error(("data", "gpuos.toml"), "gpuos config check: " + (r.stderr or r.stdout).strip())


SEMANTIC = {
    "DaemonSet": check_workload,
    "Deployment": check_workload,
    "DeviceClass": check_device_class,
    "ResourceClaimTemplate": check_claim_template,
    "ClusterRoleBinding": check_rbac_binding,
}


def validate(docs, gpuos_cli=None, want_sites=False):
    """Errors of a set of documents: [(doc, path, message)]; with want_sites also each document's sites."""
    index = Index(docs)
    errors, sites = [], {}
    seen = {}
    namespaces = {k[2] for k in index.objects if k[0] == "Namespace"}
    for d in docs:
        ctx = Ctx(d)
        b = d.body
        if not isinstance(b, dict):
            ctx.error((), f"expected an object, got {type_name(b)}")
        else:
            key = (b.get("apiVersion"), b.get("kind"))
            for field, v in zip(("apiVersion", "kind"), key):
                if field not in b:
                    ctx.error((), f"missing required field {field!r}")
                elif not isinstance(v, str):
                    ctx.error((field,), f"expected a string, got {type_name(v)}")
            if all(isinstance(v, str) for v in key) and key not in KINDS:
                ctx.error(("apiVersion",), f"unknown apiVersion/kind {key[0]} {key[1]} (known: "
                          + ", ".join(f"{a} {k}" for a, k in KINDS) + ")")
            elif key in KINDS:
                schema, namespaced = KINDS[key]
                schema.check(b, (), ctx)
                ns = s(g(b, "metadata", "namespace"))
                if not namespaced and ns is not None:
                    ctx.error(("metadata", "namespace"), f"a {key[1]} is cluster-scoped: no namespace")
                if namespaced and ns and ns not in namespaces and ns != "default":
                    ctx.error(("metadata", "namespace"), f"namespace {ns!r} is not among the manifests")
                ident = (key[1], ns, s(g(b, "metadata", "name")))
                if ident in seen:
                    ctx.error(("metadata", "name"), f"{key[1]} {ident[2]!r} also in {seen[ident].file}")
                seen.setdefault(ident, d)
                check = SEMANTIC.get(key[1])
                if check:
                    check(b, index, ctx)
                if key[1] == "ConfigMap":
                    check_config_map(b, index, ctx, gpuos_cli)
        errors += ctx.errors
        sites[id(d)] = ctx.sites
    return (errors, sites) if want_sites else errors


def check_kustomization(path, body):
    """Errors of a kustomization.yaml: its shape, and that it lists exactly the manifests beside it."""
    ctx = Ctx(Doc(path, 0, body))
    KUSTOMIZATION.check(body, (), ctx)
    listed = [r for r in (g(body, "resources") or []) if isinstance(r, str)]
    here = os.path.dirname(path)
    for i, r in enumerate(listed):
        if not os.path.exists(os.path.join(here, r)):
            ctx.error(("resources", i), f"{r} does not exist")
    files = sorted(f for f in os.listdir(here) if f.endswith((".yaml", ".yml")) and f != "kustomization.yaml")
    for f in files:
        if f not in listed:
            ctx.error(("resources",), f"{f} is not listed")
    return ctx.errors


# ---------------------------------------------------------------------------------------------
# Negative cases

def set_at(body, path, value=None, delete=False, rename=None):
    parent = body
    for p in path[:-1]:
        parent = parent[p]
    last = path[-1]
    if delete:
        del parent[last]
    elif rename is not None:
        # keep the key's place: the order of fields does not matter to the schema, but it keeps
        # error messages close to the original
        parent[rename] = parent.pop(last)
    else:
        parent[last] = value


def typo(name):
    """A plausible misspelling: two inner letters swapped, else a letter doubled."""
    for i in range(1, len(name) - 1):
        if name[i] != name[i + 1]:
            return name[:i] + name[i + 1] + name[i] + name[i + 2:]
    return name + name[-1]


def generated_cases(docs, sites):
    """(description, doc position, mutate(body), path the error must be at or under)."""
    cases = []
    for n, d in enumerate(docs):
        for kind, path, schema in sites[id(d)]:
            if kind == "object":
                obj = g(d.body, *path)
                for k in list(obj):
                    t = typo(k)
                    if t in schema.fields:
                        continue
                    cases.append((f"field {fmt_path(path + (k,))} misspelt {t!r}", n,
                                  lambda b, p=path + (k,), t=t: set_at(b, p, rename=t), path))
            elif kind == "required":
                cases.append((f"required {fmt_path(path)} removed", n,
                              lambda b, p=path: set_at(b, p, delete=True), path[:-1]))
            elif kind == "value" and schema.wrong_example is not None and path:
                w = schema.wrong_example
                article = "an" if type_name(w)[0] in "aeiou" else "a"
                cases.append((f"{fmt_path(path)} given {article} {type_name(w)}", n,
                              lambda b, p=path, w=w: set_at(b, p, copy.deepcopy(w)), path))
    return cases


def find_doc(docs, kind, name=None):
    for n, d in enumerate(docs):
        if g(d.body, "kind") == kind and (name is None or g(d.body, "metadata", "name") == name):
            return n
    return None


def targeted_cases(docs, gpuos_cli=None):
    """Mistakes an operator makes, each with the message it must be refused with."""
    ds = find_doc(docs, "DaemonSet", "gpuosd")
    dra = find_doc(docs, "DaemonSet", "gpuos-dra")
    nsd = find_doc(docs, "Namespace", "gpuos-system")
    dep = find_doc(docs, "Deployment")
    rct = find_doc(docs, "ResourceClaimTemplate")
    dc = find_doc(docs, "DeviceClass")
    crb = find_doc(docs, "ClusterRoleBinding")
    cm = find_doc(docs, "ConfigMap", "gpuos-config")
    pod = ("spec", "template", "spec")
    tc = ("spec", "spec", "devices", "config", 0, "opaque", "parameters")
    cases = [
        ("container claim names no pod claim", dep, pod + ("containers", 0, "resources", "claims", 0, "name"), "gpuoss",
         "no claim 'gpuoss'"),
        ("pod claim names no template", dep, pod + ("resourceClaims", 0, "resourceClaimTemplateName"), "gpuos-nothing",
         "no ResourceClaimTemplate"),
        ("pod claim with both a claim and a template", dep, pod + ("resourceClaims", 0, "resourceClaimName"), "x",
         "exactly one of"),
        ("volume mount names no volume", ds, pod + ("containers", 0, "volumeMounts", 0, "name"), "cfg",
         "no volume 'cfg'"),
        ("hostPath mounted elsewhere than on the host", dra, pod + ("containers", 0, "volumeMounts", 2, "mountPath"),
         "/cdi", "same path"),
        ("$(NODE_NAME) without its env variable", dra, pod + ("containers", 0, "env"), [], "$(NODE_NAME)"),
        ("selector that misses the template", ds, ("spec", "selector", "matchLabels"), {"app": "other"},
         "does not match"),
        ("ConfigMap volume names no ConfigMap", ds, pod + ("volumes", 0, "configMap", "name"), "gpuos-cfg",
         "no ConfigMap"),
        ("ServiceAccount not defined", dra, pod + ("serviceAccountName",), "gpuos", "no ServiceAccount"),
        ("hostPID as a string", ds, pod + ("hostPID",), "true", "expected true or false"),
        ("without hostPID", ds, pod + ("hostPID",), False, "needs hostPID"),
        ("interposer in the image, not on the host", dra, pod + ("containers", 0, "args", 3),
         "/usr/lib/libgpuos.so", "not on a host path"),
        ("gpuos-dra without --node-name", dra, pod + ("containers", 0, "args", 0), "--node", "needs --node-name"),
        ("gpuosd in gpuos-dra's pod", dra, pod + ("containers", 0, "name"), "gpuosd", "a DaemonSet of its own"),
        ("system-node-critical outside kube-system", ds, pod + ("priorityClassName",), "system-node-critical",
         "kube-system only"),
        ("a priority class that does not exist", dra, pod + ("priorityClassName",), "gpuos-critical",
         "no PriorityClass 'gpuos-critical'"),
        ("namespace without the Pod Security label", nsd,
         ("metadata", "labels", "pod-security.kubernetes.io/enforce"), None, "needs the label pod-security"),
        ("namespace at Pod Security baseline", nsd,
         ("metadata", "labels", "pod-security.kubernetes.io/enforce"), "baseline", "its pods use hostPID"),
        ("gpuosd config outside the ConfigMap", ds, pod + ("containers", 0, "command", 2), "/etc/gpuos.toml",
         "not in a mounted ConfigMap"),
        ("container name not a DNS label", ds, pod + ("containers", 0, "name"), "gpuosD", "DNS-1123 label"),
        ("TenantConfig of another apiVersion", rct, tc + ("apiVersion",), "gpuos.io/v2", "not one of gpuos.io/v1"),
        ("TenantConfig of another kind", rct, tc + ("kind",), "Tenant", "not one of TenantConfig"),
        ("TenantConfig with an unknown field", rct, tc + ("maxSlowDown",), "1.5", "unknown field 'maxSlowDown'"),
        ("TenantConfig mem not a size", rct, tc + ("mem",), "40 gigs", "is not a size"),
        ("TenantConfig priority out of range", rct, tc + ("priority",), 5000, "out of range"),
        ("TenantConfig class unknown", rct, tc + ("class",), "premium", "not one of guaranteed, best-effort"),
        ("TenantConfig class against its device class", rct, tc + ("class",), "best-effort", "asks class best-effort"),
        ("TenantConfig maxSlowdown below 1", rct, tc + ("maxSlowdown",), "0.9", "from 1.001 to 100"),
        ("TenantConfig sms without space", rct, tc + ("sms",), 64, "sms needs space"),
        ("claim config for a request it lacks", rct, ("spec", "spec", "devices", "config", 0, "requests", 0), "gpu0",
         "no request 'gpu0'"),
        ("request of an undefined device class", rct,
         ("spec", "spec", "devices", "requests", 0, "exactly", "deviceClassName"), "gpuos.gpuos.io", "no DeviceClass"),
        ("request with neither exactly nor firstAvailable", rct, ("spec", "spec", "devices", "requests", 0, "exactly"),
         None, "exactly one of exactly, firstAvailable"),
        ("CEL selector of another driver", dc, ("spec", "selectors", 0, "cel", "expression"),
         'device.driver == "gpu.nvidia.com"', 'device.driver == "gpuos.io"'),
        ("CEL selector of the other class", dc, ("spec", "selectors", 0, "cel", "expression"),
         'device.driver == "gpuos.io" && device.attributes["gpuos.io"].class == "nothing"', "attribute class"),
        ("binding to a missing ClusterRole", crb, ("roleRef", "name"), "gpuos", "no ClusterRole"),
        ("cluster-scoped DeviceClass given a namespace", dc, ("metadata", "namespace"), "gpuos-system",
         "cluster-scoped"),
        ("config without gpuos.toml", cm, ("data",), {"config.toml": "x"}, "needs the key gpuos.toml"),
        ("unknown apiVersion", dc, ("apiVersion",), "resource.k8s.io/v1beta1", "unknown apiVersion/kind"),
    ]
    if gpuos_cli:
        toml = g(docs[cm].body, "data", "gpuos.toml") or ""
        cases.append(("a gpuosd config that gpuosd refuses", cm, ("data", "gpuos.toml"),
                      toml.replace('log_level = "info"', 'log_level = "loud"'), "gpuos config check"))
    out = []
    for desc, n, path, value, want in cases:
        if n is None:
            raise SystemExit(f"manifest_schema.py: no manifest for the negative case {desc!r}")

        def mutate(b, path=path, value=value):
            if value is None:
                set_at(b, path, delete=True)
            else:
                set_at(b, path, value)
        out.append((desc, n, mutate, want))
    return out


def run_negative(docs, gpuos_cli, verbose):
    _, sites = validate(docs, want_sites=True)
    failures, count = [], 0
    for desc, n, mutate, where in generated_cases(docs, sites):
        mutated = list(docs)
        mutated[n] = Doc(docs[n].file, docs[n].index, copy.deepcopy(docs[n].body))
        mutate(mutated[n].body)
        errs = [e for e in validate(mutated) if e[0] is mutated[n] and e[1][:len(where)] == where]
        count += 1
        if not errs:
            failures.append(f"{docs[n].label()}: {desc}: accepted")
        elif verbose:
            print(f"  refused: {docs[n].label()}: {desc}: {errs[0][2]}")
    for desc, n, mutate, want in targeted_cases(docs, gpuos_cli):
        mutated = list(docs)
        mutated[n] = Doc(docs[n].file, docs[n].index, copy.deepcopy(docs[n].body))
        mutate(mutated[n].body)
        errs = validate(mutated, gpuos_cli)
        count += 1
        if not any(want in e[2] for e in errs):
            got = "; ".join(f"{fmt_path(e[1])}: {e[2]}" for e in errs) or "accepted"
            failures.append(f"{docs[n].label()}: {desc}: wanted an error with {want!r}, got: {got}")
        elif verbose:
            print(f"  refused: {docs[n].label()}: {desc}: {next(e[2] for e in errs if want in e[2])}")
    return count, failures


# ---------------------------------------------------------------------------------------------

def load(deploy):
    docs, kustomizations = [], []
    for root, dirs, files in os.walk(deploy):
        dirs.sort()
        for f in sorted(files):
            if not f.endswith((".yaml", ".yml")):
                continue
            path = os.path.join(root, f)
            rel = os.path.relpath(path, os.path.dirname(os.path.abspath(deploy)))
            with open(path) as fh:
                try:
                    bodies = [b for b in yaml.safe_load_all(fh) if b is not None]
                except yaml.YAMLError as e:
                    raise SystemExit(f"{rel}: not YAML: {e}")
            if f == "kustomization.yaml":
                kustomizations += [(path, rel, b) for b in bodies]
            else:
                docs += [Doc(rel, i, b) for i, b in enumerate(bodies)]
    return docs, kustomizations


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--deploy", default=os.path.join(here, "..", "..", "deploy"), help="the deploy/ directory")
    ap.add_argument("--gpuos-cli", help="the gpuos CLI, to run `gpuos config check` on the ConfigMap gpuos-config")
    ap.add_argument("-v", "--verbose", action="store_true", help="print every refused negative case")
    args = ap.parse_args()
    if not os.path.isdir(args.deploy):
        print(f"manifest_schema.py: {args.deploy} is not a directory", file=sys.stderr)
        return 2
    if args.gpuos_cli and not os.access(args.gpuos_cli, os.X_OK):
        print(f"manifest_schema.py: {args.gpuos_cli} is not executable", file=sys.stderr)
        return 2

    docs, kustomizations = load(args.deploy)
    errors = [f"{d.label()}: {fmt_path(p)}: {m}" for d, p, m in validate(docs, args.gpuos_cli)]
    for path, rel, body in kustomizations:
        errors += [f"{rel}: {fmt_path(p)}: {m}" for _, p, m in check_kustomization(path, body)]
    kinds = sorted({f"{g(d.body, 'kind')}" for d in docs})
    if errors:
        print("invalid manifests:\n  " + "\n  ".join(errors))
        return 1
    print(f"{len(docs)} manifests valid ({', '.join(kinds)}), {len(kustomizations)} kustomization(s)"
          + (", gpuos-config passes `gpuos config check`" if args.gpuos_cli else ""))

    # Kustomization checks can fail too: a manifest left out.
    for path, rel, body in kustomizations:
        mutated = copy.deepcopy(body)
        mutated["resources"] = mutated["resources"][1:]
        if not any("is not listed" in m for _, _, m in check_kustomization(path, mutated)):
            print(f"{rel}: a manifest left out of resources was not noticed")
            return 1

    count, failures = run_negative(docs, args.gpuos_cli, args.verbose)
    if failures:
        print(f"{len(failures)} of {count} negative cases were accepted:\n  " + "\n  ".join(failures))
        return 1
    print(f"{count} negative cases refused (misspelt fields, missing required fields, wrong types, "
          "dangling references, bad TenantConfigs)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
