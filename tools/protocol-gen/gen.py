#!/usr/bin/env python3
"""Generates fjord-protocol's message codecs from Kafka's JSON message schemas.

Reads the request/response/header schemas named in MESSAGES and writes one Rust module per
message, plus mod.rs, into the output directory. See README.md next to this file.
"""

import argparse
import json
import os
import re
import shutil
import subprocess
import sys

# (api key, schema base name) for every API fjord speaks; each has a Request and a Response.
MESSAGES = [
    (0, "Produce"),
    (1, "Fetch"),
    (2, "ListOffsets"),
    (3, "Metadata"),
    (8, "OffsetCommit"),
    (9, "OffsetFetch"),
    (10, "FindCoordinator"),
    (11, "JoinGroup"),
    (12, "Heartbeat"),
    (13, "LeaveGroup"),
    (14, "SyncGroup"),
    (15, "DescribeGroups"),
    (16, "ListGroups"),
    (17, "SaslHandshake"),
    (18, "ApiVersions"),
    (19, "CreateTopics"),
    (20, "DeleteTopics"),
    (21, "DeleteRecords"),
    (22, "InitProducerId"),
    (23, "OffsetForLeaderEpoch"),
    (24, "AddPartitionsToTxn"),
    (25, "AddOffsetsToTxn"),
    (26, "EndTxn"),
    (27, "WriteTxnMarkers"),
    (28, "TxnOffsetCommit"),
    (29, "DescribeAcls"),
    (30, "CreateAcls"),
    (31, "DeleteAcls"),
    (32, "DescribeConfigs"),
    (33, "AlterConfigs"),
    (34, "AlterReplicaLogDirs"),
    (35, "DescribeLogDirs"),
    (36, "SaslAuthenticate"),
    (37, "CreatePartitions"),
    (38, "CreateDelegationToken"),
    (39, "RenewDelegationToken"),
    (40, "ExpireDelegationToken"),
    (41, "DescribeDelegationToken"),
    (42, "DeleteGroups"),
    (43, "ElectLeaders"),
    (44, "IncrementalAlterConfigs"),
    (45, "AlterPartitionReassignments"),
    (46, "ListPartitionReassignments"),
    (47, "OffsetDelete"),
    (48, "DescribeClientQuotas"),
    (49, "AlterClientQuotas"),
    (50, "DescribeUserScramCredentials"),
    (51, "AlterUserScramCredentials"),
    (55, "DescribeQuorum"),
    (56, "AlterPartition"),
    (58, "Envelope"),
    (60, "DescribeCluster"),
    (61, "DescribeProducers"),
    (62, "BrokerRegistration"),
    (63, "BrokerHeartbeat"),
    (65, "DescribeTransactions"),
    (66, "ListTransactions"),
    (67, "AllocateProducerIds"),
    (68, "ConsumerGroupHeartbeat"),
    (69, "ConsumerGroupDescribe"),
    (70, "ControllerRegistration"),
    (71, "GetTelemetrySubscriptions"),
    (72, "PushTelemetry"),
    (74, "ListConfigResources"),
    (75, "DescribeTopicPartitions"),
    (76, "ShareGroupHeartbeat"),
    (77, "ShareGroupDescribe"),
    (78, "ShareFetch"),
    (79, "ShareAcknowledge"),
    (80, "AddRaftVoter"),
    (81, "RemoveRaftVoter"),
    (83, "InitializeShareGroupState"),
    (84, "ReadShareGroupState"),
    (85, "WriteShareGroupState"),
    (86, "DeleteShareGroupState"),
    (87, "ReadShareGroupStateSummary"),
    (90, "DescribeShareGroupOffsets"),
    (91, "AlterShareGroupOffsets"),
    (92, "DeleteShareGroupOffsets"),
]
HEADERS = ["RequestHeader", "ResponseHeader"]

# The coordinators' record key and value schemas ("type": "data"), generated with --records SET into
# the crate of that coordinator: `group` (`__consumer_offsets`, fjord-group; Kafka keeps them in
# group-coordinator/src/main/resources/common/message/) and `txn` (`__transaction_state`, fjord-txn;
# in transaction-coordinator/src/main/resources/common/message/).
GROUP_RECORDS = [
    "OffsetCommitKey",
    "OffsetCommitValue",
    "GroupMetadataKey",
    "GroupMetadataValue",
    "ConsumerGroupMetadataKey",
    "ConsumerGroupMetadataValue",
    "ConsumerGroupPartitionMetadataKey",
    "ConsumerGroupPartitionMetadataValue",
    "ConsumerGroupMemberMetadataKey",
    "ConsumerGroupMemberMetadataValue",
    "ConsumerGroupTargetAssignmentMetadataKey",
    "ConsumerGroupTargetAssignmentMetadataValue",
    "ConsumerGroupTargetAssignmentMemberKey",
    "ConsumerGroupTargetAssignmentMemberValue",
    "ConsumerGroupCurrentMemberAssignmentKey",
    "ConsumerGroupCurrentMemberAssignmentValue",
    "ShareGroupMemberMetadataKey",
    "ShareGroupMemberMetadataValue",
    "ShareGroupMetadataKey",
    "ShareGroupMetadataValue",
    "ShareGroupTargetAssignmentMetadataKey",
    "ShareGroupTargetAssignmentMetadataValue",
    "ShareGroupTargetAssignmentMemberKey",
    "ShareGroupTargetAssignmentMemberValue",
    "ShareGroupCurrentMemberAssignmentKey",
    "ShareGroupCurrentMemberAssignmentValue",
    "ShareGroupStatePartitionMetadataKey",
    "ShareGroupStatePartitionMetadataValue",
]
TXN_RECORDS = ["TransactionLogKey", "TransactionLogValue"]
# The share coordinator's (`__share_group_state`, fjord-share; in Kafka's
# share-coordinator/src/main/resources/common/message/).
SHARE_RECORDS = ["ShareSnapshotKey", "ShareSnapshotValue", "ShareUpdateKey", "ShareUpdateValue"]
RECORD_SETS = {
    "group": (GROUP_RECORDS, "`__consumer_offsets`"),
    "txn": (TXN_RECORDS, "`__transaction_state`"),
    "share": (SHARE_RECORDS, "`__share_group_state`"),
}

# Where generated code finds the protocol primitives and the per-message test check. Inside
# fjord-protocol they are crate items; --records generates for a crate depending on it.
PRIMITIVES_PATHS = {
    "decoder": "crate::decoder",
    "encoder": "crate::encoder",
    "varint": "crate::varint",
    "root": "crate",
    "check": "crate::test_support::check_message",
    "extra_lints": "",
}
RECORDS_PATHS = {
    "decoder": "fjord_protocol",
    "encoder": "fjord_protocol",
    "varint": "fjord_protocol::varint",
    "root": "fjord_protocol",
    "check": "fjord_protocol::test_support::check_message",
    # A record whose only tagged field is one struct decodes it with a one-armed match.
    "extra_lints": "clippy::single_match, ",
}
PATHS = dict(PRIMITIVES_PATHS)

HEADER_LINE = (
    "// Generated by tools/protocol-gen from Kafka's message schemas. Do not edit by hand;\n"
    "// change the generator and regenerate instead.\n"
)
FILE_LINTS = (
    "#![allow(clippy::derivable_impls, clippy::field_reassign_with_default, clippy::match_single_binding, "
    "clippy::needless_borrow, clippy::needless_return, unused_mut)]\n"
)

MAX_VERSION = 0x7FFF

PRIMITIVES = {
    # schema type: (rust type, fixed encoded size, decoder method, BytesMut put method)
    "int8": ("i8", 1, "read_i8", "put_i8"),
    "int16": ("i16", 2, "read_i16", "put_i16"),
    "uint16": ("u16", 2, "read_u16", "put_u16"),
    "int32": ("i32", 4, "read_i32", "put_i32"),
    "int64": ("i64", 8, "read_i64", "put_i64"),
    "float64": ("f64", 8, "read_f64", "put_f64"),
    "bool": ("bool", 1, "read_bool", None),
    "uuid": ("Uuid", 16, "read_uuid", None),
}

RUST_KEYWORDS = {"type", "match", "ref", "self", "mod", "fn", "struct", "enum", "use", "in", "loop"}


class GenError(Exception):
    pass


def strip_comments(text):
    """Drops // comments (outside strings) so the schema parses as JSON."""
    out = []
    for line in text.splitlines():
        in_str = False
        escaped = False
        cut = len(line)
        for i, ch in enumerate(line):
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == '"':
                in_str = not in_str
            elif not in_str and line.startswith("//", i):
                cut = i
                break
        out.append(line[:cut])
    return "\n".join(out)


def parse_versions(text):
    """Parses "none", "N", "N+" or "N-M" into an inclusive (lo, hi) pair, or None."""
    text = str(text).strip()
    if text == "none" or text == "":
        return None
    if text.endswith("+"):
        return (int(text[:-1]), MAX_VERSION)
    if "-" in text:
        lo, hi = text.split("-", 1)
        return (int(lo), int(hi))
    return (int(text), int(text))


def intersect(a, b):
    if a is None or b is None:
        return None
    lo, hi = max(a[0], b[0]), min(a[1], b[1])
    return (lo, hi) if lo <= hi else None


def contains(r, v):
    return r is not None and r[0] <= v <= r[1]


def snake(name):
    s = re.sub(r"([A-Z]+)([A-Z][a-z])", r"\1_\2", name)
    s = re.sub(r"([a-z0-9])([A-Z])", r"\1_\2", s)
    s = s.lower()
    return "r#" + s if s in RUST_KEYWORDS else s


class Field:
    def __init__(self, spec, msg):
        self.name = spec["name"]
        self.ident = snake(self.name)
        self.type = spec["type"]
        # A tagged-only field (no "versions") exists in its tagged versions, as Kafka's generator reads it.
        self.versions = parse_versions(spec.get("versions", spec.get("taggedVersions", "none")))
        self.nullable = intersect(parse_versions(spec.get("nullableVersions", "none")), self.versions)
        self.tagged = intersect(parse_versions(spec.get("taggedVersions", "none")), self.versions)
        self.tag = spec.get("tag")
        self.ignorable = bool(spec.get("ignorable", False))
        self.default = spec.get("default")
        if "default" in spec and self.default is None:
            # A JSON null default means the same as the string "null".
            self.default = "null"
        flex = spec.get("flexibleVersions")
        # A field may narrow the message's flexible versions ("none": always classic encoding).
        self.has_flex_override = flex is not None
        self.flex_override = None if flex is None else parse_versions(flex)
        self.is_array = self.type.startswith("[]")
        self.elem = self.type[2:] if self.is_array else self.type
        self.struct = None  # element/struct name when the type is a struct
        if self.elem not in PRIMITIVES and self.elem not in ("string", "bytes", "records"):
            self.struct = self.elem
            if "fields" in spec:
                msg.add_struct(self.elem, spec["fields"])
        if (self.tagged is None) != (self.tag is None):
            raise GenError(f"{msg.name}.{self.name}: tag and taggedVersions must come together")
        if self.tagged is not None and self.tagged[1] < self.versions[1]:
            raise GenError(f"{msg.name}.{self.name}: tagged versions must extend to the last version")
        if self.tagged is not None and self.struct and not self.is_array and self.nullable:
            # Kafka writes such a field only when present, as varint 1 then the struct.
            if self.default != "null" or self.tagged[0] > self.versions[0]:
                raise GenError(f"{msg.name}.{self.name}: nullable tagged structs must default to null")
        if self.type == "records" and self.tagged is not None:
            raise GenError(f"{msg.name}.{self.name}: records cannot be tagged")

    def untagged(self):
        """Versions in which the field is written inline rather than as a tagged field."""
        if self.versions is None:
            return None
        if self.tagged is None:
            return self.versions
        if self.tagged[0] <= self.versions[0]:
            return None
        return (self.versions[0], self.tagged[0] - 1)

    def is_option(self):
        return self.type == "records" or (
            self.nullable is not None and (self.is_array or self.elem in ("string", "bytes") or self.struct)
        )


class Struct:
    def __init__(self, name, fields):
        self.name = name
        self.field_specs = fields
        self.fields = []
        self.used_in_array = False


class Message:
    def __init__(self, spec, api_key):
        self.name = spec["name"]
        self.kind = spec["type"]
        self.api_key = api_key
        self.valid = parse_versions(spec["validVersions"])
        self.flexible = intersect(parse_versions(spec.get("flexibleVersions", "none")), self.valid)
        self.structs = {}
        self.order = []
        for common in spec.get("commonStructs", []):
            self.add_struct(common["name"], common["fields"])
        self.top = Struct(self.name, spec["fields"])
        self.top.fields = [Field(f, self) for f in spec["fields"]]
        # Resolve fields of nested structs (may register further nested structs while doing so).
        i = 0
        while i < len(self.order):
            st = self.structs[self.order[i]]
            if not st.fields:
                st.fields = [Field(f, self) for f in st.field_specs]
            i += 1
        for st in [self.top] + [self.structs[n] for n in self.order]:
            for f in st.fields:
                if f.struct:
                    if f.struct not in self.structs:
                        raise GenError(f"{self.name}: unknown struct type {f.struct}")
                    if f.is_array:
                        self.structs[f.struct].used_in_array = True
        if self.name in self.structs:
            raise GenError(f"{self.name}: nested struct has the message's name")

    def add_struct(self, name, fields):
        if name in self.structs:
            if [f["name"] for f in self.structs[name].field_specs] != [f["name"] for f in fields]:
                raise GenError(f"{self.name}: struct {name} defined twice differently")
            return
        self.structs[name] = Struct(name, fields)
        self.order.append(name)

    def all_structs(self):
        return [self.top] + [self.structs[n] for n in self.order]

    # ----- version conditions -------------------------------------------------------------

    def cond(self, r):
        """A Rust boolean expression true exactly for the message versions in range r."""
        r = intersect(r, self.valid)
        if r is None:
            return "false"
        lo, hi = r
        vlo, vhi = self.valid
        if lo <= vlo and hi >= vhi:
            return "true"
        if lo <= vlo:
            return f"version <= {hi}"
        if hi >= vhi:
            return f"version >= {lo}"
        if lo == hi:
            return f"version == {lo}"
        return f"({lo}..={hi}).contains(&version)"

    def not_cond(self, r):
        """The complement of cond(r) within the valid versions."""
        r = intersect(r, self.valid)
        vlo, vhi = self.valid
        if r is None:
            return "true"
        parts = []
        if r[0] > vlo:
            parts.append(f"version < {r[0]}")
        if r[1] < vhi:
            parts.append(f"version > {r[1]}")
        if not parts:
            return "false"
        if len(parts) == 1:
            return parts[0]
        if r[0] == r[1]:
            return f"version != {r[0]}"
        return f"!({r[0]}..={r[1]}).contains(&version)"

    def compact(self, field):
        """Whether the field uses compact encodings: the expression, given `flexible`."""
        if field.has_flex_override:
            return self.cond(intersect(field.flex_override, self.flexible))
        return "flexible"

    def flexible_cond(self):
        return self.cond(self.flexible)

    # ----- minimum encoded sizes (for bounding array allocations) ----------------------------

    def min_size(self, struct, v):
        flexible = contains(self.flexible, v)
        total = 1 if flexible else 0
        for f in struct.fields:
            if not contains(f.versions, v) or contains(f.tagged, v):
                continue
            compact = flexible
            if f.has_flex_override:
                compact = flexible and contains(f.flex_override, v)
            total += self.field_min_size(f, v, compact)
        return max(total, 1)

    def field_min_size(self, f, v, compact):
        if f.is_array:
            return 1 if compact else 4
        return self.elem_min_size(f.elem, v, compact, contains(f.nullable, v))

    def elem_min_size(self, elem, v, compact, nullable=False):
        if elem in PRIMITIVES:
            return PRIMITIVES[elem][1]
        if elem == "string":
            return 1 if compact else 2
        if elem in ("bytes", "records"):
            return 1 if compact else 4
        if nullable:
            return 1
        return self.min_size(self.structs[elem], v)

    def min_size_expr(self, elem):
        """Rust expression for an array element's minimum size in the current version."""
        vlo, vhi = self.valid
        sizes = [(v, self.elem_min_size(elem, v, contains(self.flexible, v))) for v in range(vlo, vhi + 1)]
        groups = []
        for v, s in sizes:
            if groups and groups[-1][2] == s:
                groups[-1][1] = v
            else:
                groups.append([v, v, s])
        if len(groups) == 1:
            return str(groups[0][2])
        arms = []
        for i, (lo, hi, s) in enumerate(groups):
            if i == len(groups) - 1:
                arms.append(f"_ => {s}")
            elif lo == hi:
                arms.append(f"{lo} => {s}")
            else:
                arms.append(f"{lo}..={hi} => {s}")
        return "match version { " + ", ".join(arms) + " }"


# ----- Rust code emission ------------------------------------------------------------------


def rust_elem_type(elem):
    if elem in PRIMITIVES:
        return PRIMITIVES[elem][0]
    if elem == "string":
        return "String"
    if elem in ("bytes", "records"):
        return "Bytes"
    return elem


def rust_type(f):
    base = rust_elem_type(f.elem)
    if f.is_array:
        base = f"Vec<{base}>"
    return f"Option<{base}>" if f.is_option() else base


def int_literal(text, rust):
    text = str(text).strip()
    value = int(text, 16) if text.lower().startswith(("0x", "-0x")) else int(text)
    if rust == "f64":
        return repr(float(text))
    return str(value)


def default_expr(f):
    d = f.default
    if f.is_array:
        if f.is_option():
            return "None" if d == "null" else "Some(Vec::new())"
        return "Vec::new()"
    if f.type == "records":
        return "None"
    if f.struct:
        if f.is_option():
            return "None" if d == "null" else f"Some({f.struct}::default())"
        return f"{f.struct}::default()"
    if f.elem == "string":
        if f.is_option() and (d is None or d == "null"):
            return "None" if d == "null" else "Some(String::new())"
        text = "" if d is None else str(d)
        lit = "String::new()" if text == "" else f"String::from({json.dumps(text)})"
        return f"Some({lit})" if f.is_option() else lit
    if f.elem == "bytes":
        if f.is_option():
            return "None" if d == "null" else "Some(Bytes::new())"
        return "Bytes::new()"
    if f.elem == "uuid":
        return "Uuid::ZERO"
    if f.elem == "bool":
        return "true" if str(d).lower() == "true" else "false"
    rust = PRIMITIVES[f.elem][0]
    if d is None or str(d) == "":
        return "0.0" if rust == "f64" else "0"
    return int_literal(d, rust)


def non_default_check(f):
    """A Rust expression true when self.<field> differs from its default."""
    d = default_expr(f)
    this = f"self.{f.ident}"
    if d == "None":
        return f"{this}.is_some()"
    if d in ("Vec::new()", "String::new()", "Bytes::new()"):
        return f"!{this}.is_empty()"
    if f.elem == "bool" and not f.is_array:
        return this if d == "false" else f"!{this}"
    return f"{this} != {d}"


def read_elem(msg, elem, compact, src):
    """Expression reading one non-null element of type elem from decoder `src`."""
    if elem in PRIMITIVES:
        return f"{src}.{PRIMITIVES[elem][2]}()?"
    if elem == "string":
        return f"{src}.read_string({compact})?"
    if elem in ("bytes", "records"):
        return f"{src}.read_bytes({compact})?"
    return f"{elem}::decode({src}, version)?"


def read_field(msg, f, compact, src, tagged=False):
    """Expression reading field f (as its Rust type) from decoder `src`."""
    nullable = msg.cond(f.nullable)
    if f.is_array:
        size = msg.min_size_expr(f.elem)
        elem = read_elem(msg, f.elem, compact, "d")
        # Every element read is a single fallible call, so the closure returns it directly.
        closure = f"|d| {elem.removesuffix('?')}"
        plain = f"read_array({src}, {compact}, {size}, {closure})?"
        if not f.is_option():
            return plain
        nullable_read = f"read_nullable_array({src}, {compact}, {size}, {closure})?"
        return pick_nullable(nullable, nullable_read, f"Some({plain})")
    if f.struct:
        plain = f"{f.struct}::decode({src}, version)?"
        if not f.is_option():
            return plain
        if tagged:
            nullable_read = f"if {src}.read_unsigned_varint()? == 0 {{ None }} else {{ Some({plain}) }}"
        else:
            nullable_read = f"if {src}.read_i8()? < 0 {{ None }} else {{ Some({plain}) }}"
        return pick_nullable(nullable, nullable_read, f"Some({plain})")
    if f.elem == "string" and f.is_option():
        return pick_nullable(nullable, f"{src}.read_nullable_string({compact})?", f"Some({src}.read_string({compact})?)")
    if f.elem in ("bytes", "records") and f.is_option():
        return pick_nullable(nullable, f"{src}.read_nullable_bytes({compact})?", f"Some({src}.read_bytes({compact})?)")
    return read_elem(msg, f.elem, compact, src)


def pick_nullable(cond, nullable_expr, plain_expr):
    if cond == "true":
        return nullable_expr
    if cond == "false":
        return plain_expr
    return f"if {cond} {{ {nullable_expr} }} else {{ {plain_expr} }}"


def write_elem(msg, elem, compact, out, value):
    """Statement writing one element `value` (a reference) into `out`, evaluating to Result."""
    if elem in PRIMITIVES:
        put = PRIMITIVES[elem][3]
        if elem == "bool":
            return f"{{ {out}.put_u8(u8::from(*{value})); Ok(()) }}"
        if elem == "uuid":
            return f"{{ {out}.put_slice(&{value}.0); Ok(()) }}"
        return f"{{ {out}.{put}(*{value}); Ok(()) }}"
    if elem == "string":
        return f"put_string({out}, {value}, {compact})"
    if elem == "bytes":
        return f"put_bytes({out}, {value}, {compact})"
    if elem == "records":
        # Through put_records, so an encoding may leave the record batches out (deferred parts).
        return f"put_records({out}, {value}, {compact})"
    return f"{value}.encode({out}, version)"


def write_field(msg, st, f, compact, out, tagged=False):
    """Statements writing field f of self into `out`."""
    this = f"self.{f.ident}"
    label = json.dumps(f"{st.name}.{f.name}")
    if f.is_array:
        closure = f"|o, e| {write_elem(msg, f.elem, compact, 'o', 'e')}"
        if not f.is_option():
            return f"put_array({out}, &{this}, {compact}, {closure})?;"
        return write_option(
            msg, f, label,
            f"put_nullable_array({out}, {this}.as_deref(), {compact}, {closure})?;",
            f"put_array({out}, v, {compact}, {closure})?;",
        )
    if f.struct:
        if not f.is_option():
            return f"{this}.encode({out}, version)?;"
        if tagged:
            # Only reached when present: a null tagged struct is its default and is left out.
            nullable = (
                f"if let Some(v) = &{this} {{ put_unsigned_varint({out}, 1); v.encode({out}, version)?; }}"
            )
        else:
            nullable = (
                f"match &{this} {{ Some(v) => {{ {out}.put_i8(1); v.encode({out}, version)?; }} "
                f"None => {out}.put_i8(-1), }}"
            )
        return write_option(msg, f, label, nullable, f"v.encode({out}, version)?;")
    if f.elem == "string" and f.is_option():
        return write_option(
            msg, f, label,
            f"put_nullable_string({out}, {this}.as_deref(), {compact})?;",
            f"put_string({out}, v, {compact})?;",
        )
    if f.elem == "bytes" and f.is_option():
        return write_option(
            msg, f, label,
            f"put_nullable_bytes({out}, {this}.as_deref(), {compact})?;",
            f"put_bytes({out}, v, {compact})?;",
        )
    if f.elem == "records" and f.is_option():
        return write_option(
            msg, f, label,
            f"put_nullable_records({out}, {this}.as_ref(), {compact})?;",
            f"put_records({out}, v, {compact})?;",
        )
    if f.elem in ("string", "bytes", "records"):
        return write_elem(msg, f.elem, compact, out, f"&{this}") + "?;"
    if f.elem == "bool":
        return f"{out}.put_u8(u8::from({this}));"
    if f.elem == "uuid":
        return f"{out}.put_slice(&{this}.0);"
    return f"{out}.{PRIMITIVES[f.elem][3]}({this});"


def write_option(msg, f, label, nullable_stmt, plain_stmt_with_v):
    """Chooses between writing an Option field as nullable or requiring it to be present."""
    plain = (
        f"let v = self.{f.ident}.as_ref().ok_or(EncodeError::NullValue {{ field: {label}, version }})?; "
        f"{plain_stmt_with_v}"
    )
    cond = msg.cond(f.nullable)
    if cond == "true":
        return nullable_stmt
    if cond == "false":
        return "{ " + plain + " }"
    return f"if {cond} {{ {nullable_stmt} }} else {{ {plain} }}"


def emit_if(cond, body, indent="        "):
    if cond == "false":
        return ""
    if cond == "true":
        return "".join(f"{indent}{line}\n" for line in body)
    out = f"{indent}if {cond} {{\n"
    out += "".join(f"{indent}    {line}\n" for line in body)
    out += f"{indent}}}\n"
    return out


def sample_value(msg, f, idx):
    """A distinctive non-default value for field f (used only by generated tests)."""
    def elem_value(elem, n):
        if elem in PRIMITIVES:
            rust = PRIMITIVES[elem][0]
            if elem == "bool":
                return "true"
            if elem == "uuid":
                return f"Uuid([{(idx + n) % 250 + 1}; 16])"
            base = {"i8": 10, "i16": 1000, "u16": 2000, "i32": 100_000, "i64": 10_000_000_000, "f64": 0.5}[rust]
            if rust == "f64":
                return repr(base + idx + n)
            return str(base + idx + n)
        if elem == "string":
            return f"String::from({json.dumps(f'{f.name}-{n}')})"
        if elem in ("bytes", "records"):
            return f'Bytes::from_static(b"{f.name}-{n}")'
        return f"{elem}::sample(version)"

    if f.is_array:
        if f.struct:
            value = f"vec![{elem_value(f.elem, 0)}]"
        else:
            value = f"vec![{elem_value(f.elem, 0)}, {elem_value(f.elem, 1)}]"
    elif f.elem == "bool":
        value = "false" if default_expr(f) == "true" else "true"
    else:
        value = elem_value(f.elem, 0)
    return f"Some({value})" if f.is_option() else value


def gen_struct(msg, st):
    is_top = st is msg.top
    lines = []
    lines.append("#[derive(Debug, Clone, PartialEq)]")
    lines.append(f"pub struct {st.name} {{")
    for f in st.fields:
        lines.append(f"    pub {f.ident}: {rust_type(f)},")
    lines.append("}")
    lines.append("")
    lines.append(f"impl Default for {st.name} {{")
    lines.append("    fn default() -> Self {")
    lines.append(f"        {st.name} {{")
    for f in st.fields:
        lines.append(f"            {f.ident}: {default_expr(f)},")
    lines.append("        }")
    lines.append("    }")
    lines.append("}")
    lines.append("")

    name_lit = json.dumps(st.name)
    version_check_enc = (
        f"        if !({msg.valid[0]}..={msg.valid[1]}).contains(&version) {{\n"
        f"            return Err(EncodeError::UnsupportedVersion {{ message: {name_lit}, version }});\n"
        f"        }}\n"
    )
    version_check_dec = version_check_enc.replace("EncodeError", "DecodeError")
    flex_cond = msg.flexible_cond()

    # ---- encode
    body = ""
    if is_top:
        body += version_check_enc
    for f in st.fields:
        untagged = f.untagged()
        if untagged is not None:
            body += emit_if(msg.cond(untagged), [write_field(msg, st, f, msg.compact(f), "out")])
        if not f.ignorable and msg.cond(f.versions) != "true":
            label = json.dumps(f"{st.name}.{f.name}")
            absent = msg.not_cond(f.versions)
            # A field of no valid version (kept in the schema for a removed one) is never sent.
            guard = non_default_check(f) if absent == "true" else f"({absent}) && {non_default_check(f)}"
            body += (
                f"        if {guard} {{\n"
                f"            return Err(EncodeError::FieldNotSupported {{ field: {label}, version }});\n"
                f"        }}\n"
            )
    tagged = sorted((f for f in st.fields if f.tagged is not None), key=lambda f: f.tag)
    tag_body = []
    if tagged:
        tag_body.append("let mut tagged = TaggedFields::default();")
        for f in tagged:
            cond = msg.cond(f.tagged)
            check = non_default_check(f)
            full = check if cond == "true" else f"{cond} && {check}"
            tag_body.append(f"if {full} {{")
            tag_body.append("    let mut value = BytesMut::new();")
            tag_body.append("    let field_out = &mut value;")
            tag_body.append("    " + write_field(msg, st, f, "true", "field_out", tagged=True))
            tag_body.append(f"    tagged.push({f.tag}, &value)?;")
            tag_body.append("}")
        tag_body.append("tagged.finish(out);")
    else:
        tag_body.append("put_unsigned_varint(out, 0);")
    body += emit_if(flex_cond, tag_body)
    body += "        Ok(())\n"
    if re.search(r"\bflexible\b", body):
        body = f"        let flexible = {flex_cond};\n" + body
    uses_version = re.search(r"\bversion\b", body) is not None
    lines.append(f"impl Encodable for {st.name} {{")
    lines.append(f"    fn encode(&self, out: &mut BytesMut, {'version' if uses_version else '_version'}: i16) -> Result<(), EncodeError> {{")
    lines.append(body.rstrip("\n"))
    lines.append("    }")
    lines.append("}")
    lines.append("")

    # ---- decode
    body = ""
    if is_top:
        body += version_check_dec
    body += "        let mut this = Self::default();\n"
    for f in st.fields:
        untagged = f.untagged()
        if untagged is not None:
            body += emit_if(msg.cond(untagged), [f"this.{f.ident} = {read_field(msg, f, msg.compact(f), 'input')};"])
    tag_body = []
    if tagged:
        tag_body.append("let count = input.read_unsigned_varint()?;")
        tag_body.append("for _ in 0..count {")
        tag_body.append("    let (tag, mut field) = input.read_tagged_field()?;")
        tag_body.append("    let field = &mut field;")
        tag_body.append("    match tag {")
        for f in tagged:
            cond = msg.cond(f.tagged)
            guard = "" if cond == "true" else f" if {cond}"
            tag_body.append(f"        {f.tag}{guard} => this.{f.ident} = {read_field(msg, f, 'true', 'field', tagged=True)},")
        tag_body.append("        // Unknown tags are skipped: their bytes were consumed with the field.")
        tag_body.append("        _ => {}")
        tag_body.append("    }")
        tag_body.append("}")
    else:
        tag_body.append("input.skip_tagged_fields()?;")
    body += emit_if(flex_cond, tag_body)
    body += "        Ok(this)\n"
    if re.search(r"\bflexible\b", body):
        body = f"        let flexible = {flex_cond};\n" + body
    uses_version = re.search(r"\bversion\b", body) is not None
    lines.append(f"impl Decodable for {st.name} {{")
    lines.append(f"    fn decode(input: &mut Decoder, {'version' if uses_version else '_version'}: i16) -> Result<Self, DecodeError> {{")
    lines.append(body.rstrip("\n"))
    lines.append("    }")
    lines.append("}")
    lines.append("")

    # ---- sample for tests
    body = "        let mut this = Self::default();\n"
    for i, f in enumerate(st.fields):
        body += emit_if(msg.cond(f.versions), [f"this.{f.ident} = {sample_value(msg, f, i)};"])
    body += "        this\n"
    uses_version = re.search(r"\bversion\b", body) is not None
    lines.append("#[cfg(test)]")
    lines.append(f"impl {st.name} {{")
    lines.append("    /// A value with every field present in `version` set to a non-default value.")
    lines.append(f"    pub(crate) fn sample({'version' if uses_version else '_version'}: i16) -> Self {{")
    lines.append(body.rstrip("\n"))
    lines.append("    }")
    lines.append("}")
    lines.append("")
    return "\n".join(lines)


def is_error_code(f):
    return f.type == "int16" and f.name.endswith("ErrorCode")


def gen_error_visitor(msg, st):
    """A response struct's `visit_error_codes`: each error code field it holds, its own and its nested
    structs' (Kafka's `errorCounts`)."""
    stmts = []
    for f in st.fields:
        if is_error_code(f):
            stmts.append(f"visit(self.{f.ident});")
        elif f.struct and f.is_array:
            each = "item.visit_error_codes(visit);"
            if f.is_option():
                stmts.append(f"if let Some(items) = &self.{f.ident} {{ for item in items {{ {each} }} }}")
            else:
                stmts.append(f"for item in &self.{f.ident} {{ {each} }}")
        elif f.struct:
            if f.is_option():
                stmts.append(f"if let Some(item) = &self.{f.ident} {{ item.visit_error_codes(visit); }}")
            else:
                stmts.append(f"self.{f.ident}.visit_error_codes(visit);")
    param = "visit" if stmts else "_visit"
    lines = [f"impl {st.name} {{"]
    lines.append("    /// Calls `visit` with every error code this answer carries, nested ones included.")
    lines.append(f"    pub fn visit_error_codes(&self, {param}: &mut dyn FnMut(i16)) {{")
    lines.extend("        " + stmt for stmt in stmts)
    lines.append("    }")
    lines.append("}")
    lines.append("")
    return "\n".join(lines)


def module_name(name):
    return snake(name)


def imports(code):
    """The use lines for the crate items that the generated code mentions."""
    def used(names):
        return [n for n in names if re.search(r"\b" + n + r"\b", code)]

    lines = []
    from_bytes = used(["Bytes", "BytesMut"])
    if re.search(r"\.put_(i8|i16|u16|i32|i64|f64|u8|slice)\(", code):
        from_bytes.insert(0, "BufMut")
    if from_bytes:
        lines.append("use bytes::{" + ", ".join(from_bytes) + "};\n")
    groups = [
        (PATHS["decoder"], ["read_array", "read_nullable_array"]),
        (PATHS["encoder"], ["put_array", "put_bytes", "put_nullable_array", "put_nullable_bytes",
                            "put_nullable_records", "put_nullable_string", "put_records",
                            "put_string", "TaggedFields"]),
        (PATHS["varint"], ["put_unsigned_varint"]),
        (PATHS["root"], ["DecodeError", "Decodable", "Decoder", "Encodable", "EncodeError", "Uuid"]),
    ]
    merged = {}
    for path, names in groups:
        merged.setdefault(path, []).extend(names)
    for path, names in merged.items():
        names = used(names)
        if len(names) == 1:
            lines.append(f"use {path}::{names[0]};")
        elif names:
            lines.append(f"use {path}::{{{', '.join(names)}}};")
    lines.append("")
    return lines


def gen_message(msg):
    out = [HEADER_LINE]
    out.append(f"//! The {msg.name} {msg.kind} (versions {msg.valid[0]}-{msg.valid[1]}).\n")
    out.append(FILE_LINTS.replace("#![allow(", "#![allow(" + PATHS["extra_lints"]))
    body = [gen_struct(msg, st) for st in msg.all_structs()]
    if msg.kind == "response":
        body += [gen_error_visitor(msg, st) for st in msg.all_structs()]
    out.extend(imports("\n".join(body)))
    out.extend(body)
    if msg.kind == "request":
        flex = msg.flexible[0] if msg.flexible else MAX_VERSION
        resp = msg.name[: -len("Request")] + "Response"
        out.append(f"impl crate::Request for {msg.name} {{")
        out.append(f"    const API_KEY: i16 = {msg.api_key};")
        out.append(f"    const MIN_VERSION: i16 = {msg.valid[0]};")
        out.append(f"    const MAX_VERSION: i16 = {msg.valid[1]};")
        out.append(f"    const FLEXIBLE_FROM: i16 = {flex};")
        out.append(f"    type Response = super::{module_name(resp)}::{resp};")
        out.append("}\n")
    out.append("#[cfg(test)]")
    out.append("mod tests {")
    out.append("    #[test]")
    out.append("    fn sample_round_trips_and_truncation_fails_in_every_version() {")
    out.append(
        f"        {PATHS['check']}::<super::{msg.name}>("
        f"{msg.valid[0]}..={msg.valid[1]}, super::{msg.name}::sample);"
    )
    out.append("    }")
    out.append("}")
    return "\n".join(out) + "\n"


def gen_mod(messages):
    out = [HEADER_LINE]
    out.append("//! Codecs for every Kafka API fjord speaks, one module per message.\n")
    out.append("use bytes::BytesMut;\n")
    out.append("use crate::{ApiKey, DecodeError, Decodable, Decoder, Encodable, EncodeError};\n")
    for m in messages:
        out.append(f"pub mod {module_name(m.name)};")
    out.append("")
    for m in messages:
        out.append(f"pub use {module_name(m.name)}::{m.name};")
    out.append("")
    for kind, title in (("request", "Request"), ("response", "Response")):
        items = [m for m in messages if m.kind == kind]
        out.append(f"/// The body of any supported {kind}, tagged by its API.")
        out.append("#[derive(Debug, Clone, PartialEq)]")
        out.append("#[allow(clippy::large_enum_variant)]")
        out.append(f"pub enum {title}Body {{")
        for m in items:
            api = m.name[: -len(title)]
            out.append(f"    {api}({m.name}),")
        out.append("}\n")
        out.append(f"impl {title}Body {{")
        out.append(f"    /// Decodes the body of a {kind} for `api_key` at `version`.")
        out.append("    pub fn decode(api_key: ApiKey, input: &mut Decoder, version: i16) -> Result<Self, DecodeError> {")
        out.append("        Ok(match api_key {")
        for m in items:
            api = m.name[: -len(title)]
            out.append(f"            ApiKey::{api} => {title}Body::{api}({m.name}::decode(input, version)?),")
        out.append("        })")
        out.append("    }\n")
        out.append("    /// The API this body belongs to.")
        out.append("    pub fn api_key(&self) -> ApiKey {")
        out.append("        match self {")
        for m in items:
            api = m.name[: -len(title)]
            out.append(f"            {title}Body::{api}(_) => ApiKey::{api},")
        out.append("        }")
        out.append("    }\n")
        out.append("    /// Encodes the body at `version`.")
        out.append("    pub fn encode(&self, out: &mut BytesMut, version: i16) -> Result<(), EncodeError> {")
        out.append("        match self {")
        for m in items:
            api = m.name[: -len(title)]
            out.append(f"            {title}Body::{api}(body) => body.encode(out, version),")
        out.append("        }")
        out.append("    }")
        if kind == "response":
            out.append("")
            out.append("    /// Calls `visit` with every error code the answer carries, nested ones included.")
            out.append("    pub fn visit_error_codes(&self, visit: &mut dyn FnMut(i16)) {")
            out.append("        match self {")
            for m in items:
                api = m.name[: -len(title)]
                out.append(f"            {title}Body::{api}(body) => body.visit_error_codes(visit),")
            out.append("        }")
            out.append("    }")
        out.append("}\n")
    out.extend(gen_throttle_offsets([m for m in messages if m.kind == "response"]))
    return "\n".join(out) + "\n"


def throttle_offsets(msg):
    """(lo, hi, offset) runs of versions in which a response's ThrottleTimeMs is written at a fixed
    offset from the start of its body: only fixed-size fields before it."""
    fields = msg.top.fields
    names = [f.name for f in fields]
    if "ThrottleTimeMs" not in names:
        return []
    throttle = fields[names.index("ThrottleTimeMs")]
    before = fields[: names.index("ThrottleTimeMs")]
    runs = []
    for v in range(msg.valid[0], msg.valid[1] + 1):
        if not contains(throttle.untagged(), v):
            continue
        offset = 0
        for f in before:
            if not contains(f.untagged(), v):
                continue
            if f.is_array or f.elem not in PRIMITIVES:
                offset = None
                break
            offset += PRIMITIVES[f.elem][1]
        if offset is None:
            continue
        if runs and runs[-1][1] == v - 1 and runs[-1][2] == offset:
            runs[-1] = (runs[-1][0], v, offset)
        else:
            runs.append((v, v, offset))
    return runs


def gen_throttle_offsets(responses):
    out = ["/// Where `throttle_time_ms` sits in the encoded body of a response to `api_key` at `version`,"]
    out.append("/// counted from the start of the body, when it is at a fixed place (only fixed-size fields")
    out.append("/// before it); None otherwise. A throttle decided after a response is encoded is written there.")
    out.append("pub fn throttle_time_offset(api_key: ApiKey, version: i16) -> Option<usize> {")
    out.append("    match api_key {")
    for m in responses:
        runs = throttle_offsets(m)
        if not runs:
            continue
        api = m.name[: -len("Response")]
        arms = " ".join(f"{lo}..={hi} => Some({off})," for lo, hi, off in runs)
        out.append(f"        ApiKey::{api} => match version {{ {arms} _ => None }},")
    out.append("        _ => None,")
    out.append("    }")
    out.append("}")
    return out


def gen_records_mod(messages, topic):
    out = [HEADER_LINE]
    out.append(f"//! Codecs for the {topic} record keys and values, one module per schema.\n")
    for m in messages:
        out.append(f"pub mod {module_name(m.name)};")
    out.append("")
    for m in messages:
        out.append(f"pub use {module_name(m.name)}::{m.name};")
    return "\n".join(out) + "\n"


def load(schemas, name, api_key):
    path = os.path.join(schemas, name + ".json")
    with open(path, encoding="utf-8") as fh:
        spec = json.loads(strip_comments(fh.read()))
    if spec.get("name") != name:
        raise GenError(f"{path}: expected message {name}, found {spec.get('name')}")
    if api_key is not None and spec.get("apiKey") != api_key:
        raise GenError(f"{path}: expected api key {api_key}, found {spec.get('apiKey')}")
    return Message(spec, api_key)


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--schemas", required=True, help="directory holding Kafka's message JSON schemas")
    parser.add_argument("--out", required=True, help="output directory for the generated Rust modules")
    parser.add_argument(
        "--records",
        choices=sorted(RECORD_SETS),
        help="generate a coordinator's record schemas (RECORD_SETS) for its crate instead",
    )
    args = parser.parse_args()
    if args.records:
        PATHS.update(RECORDS_PATHS)
        names, topic = RECORD_SETS[args.records]
        messages = [load(args.schemas, name, None) for name in names]
        mod_text = gen_records_mod(messages, topic)
    else:
        messages = [load(args.schemas, h, None) for h in HEADERS]
        for api_key, base in MESSAGES:
            messages.append(load(args.schemas, base + "Request", api_key))
            messages.append(load(args.schemas, base + "Response", api_key))
        mod_text = gen_mod(messages)
    os.makedirs(args.out, exist_ok=True)
    for m in messages:
        with open(os.path.join(args.out, module_name(m.name) + ".rs"), "w", encoding="utf-8") as fh:
            fh.write(gen_message(m))
    with open(os.path.join(args.out, "mod.rs"), "w", encoding="utf-8") as fh:
        fh.write(mod_text)
    rustfmt = shutil.which("rustfmt")
    if rustfmt is None:
        print("protocol-gen: rustfmt not found; output is not formatted", file=sys.stderr)
    else:
        names = [module_name(m.name) + ".rs" for m in messages] + ["mod.rs"]
        files = sorted(os.path.join(args.out, f) for f in names)
        subprocess.run([rustfmt, "--edition", "2021", *files], check=True)
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except GenError as err:
        print(f"protocol-gen: {err}", file=sys.stderr)
        sys.exit(1)
