#!/usr/bin/env python3
"""Writes the hand-made seed inputs of the fuzz targets into seeds/<target>/.

The seeds are committed; run this again (python3, standard library only)
after changing it. `./run --grow` then merges what they add into corpus/.

- packet: a query for every demo name and type (SRV, AAAA, ANY, AXFR, PTR,
  ...), with and without EDNS, EDNS options, odd payload sizes, 0x20 case,
  and malformed messages: compression pointers and loops, wrong counts,
  oversize labels and names, two OPTs, responses, other opcodes and classes.
- zones_file: every YAML file of zones/demo, the demo Links and namespaces,
  the test fixtures, and edits (`#%after`) of them.
- config_file: the example configs of deploy/, the README and docs/, a clusters
  file, and variants.
"""

import os
import re
import shutil
import struct

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, "..", ".."))
SEEDS = os.path.join(HERE, "seeds")

ZONE = "clusterset.local"
T = {
    "A": 1, "NS": 2, "CNAME": 5, "SOA": 6, "PTR": 12, "MX": 15, "TXT": 16,
    "AAAA": 28, "SRV": 33, "OPT": 41, "HTTPS": 65, "IXFR": 251, "AXFR": 252,
    "ANY": 255, "TYPE0": 0, "TYPE65535": 65535,
}


def name_wire(name):
    out = b""
    for label in name.rstrip(".").split("."):
        if label:
            raw = label.encode("latin-1")
            out += bytes([len(raw)]) + raw
    return out + b"\0"


def opt(payload=1232, version=0, do=False, options=b"", ext_rcode=0):
    flags = 0x8000 if do else 0
    return (b"\0" + struct.pack(">HHBBHH", 41, payload, ext_rcode, version, flags,
                                len(options)) + options)


def header(id_=0x1234, flags=0x0100, qd=1, an=0, ns=0, ar=0):
    return struct.pack(">HHHHHH", id_, flags, qd, an, ns, ar)


def query(name, qtype, edns=opt(), id_=0x1234, flags=0x0100, qclass=1):
    q = name_wire(name) + struct.pack(">HH", qtype, qclass)
    return header(id_, flags, 1, 0, 0, 1 if edns else 0) + q + (edns or b"")


def write(target, name, data):
    d = os.path.join(SEEDS, target)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, name), "wb") as f:
        f.write(data)


def packet_seeds():
    z = ZONE
    names = {
        "apex": z,
        "ns": "ns.dns." + z,
        "version": "dns-version." + z,
        "svc": "svc." + z,
        "ns-shop": "shop.svc." + z,
        "cache-west": "cache-west.shop.svc." + z,
        "checkout-west": "checkout-west.shop.svc." + z,
        "frontend-east": "frontend-east.shop.svc." + z,
        "search-east": "search-east.shop.svc." + z,
        "search-0": "search-0.search-east.shop.svc." + z,
        "payments-north": "payments-north.shop.svc." + z,
        "api-south": "api-south.shop.svc." + z,
        "reviews-south": "reviews-south.shop.svc." + z,
        "cache-fed": "cache-federated.shop.svc." + z,
        "db-fed": "db-federated.data.svc." + z,
        "db-0-north": "db-0.north.db-federated.data.svc." + z,
        "db-0-north-alias": "db-0-north.db-federated.data.svc." + z,
        "db-0-nolabel": "db-0.db-federated.data.svc." + z,
        "srv-peer": "_peer._tcp.db-federated.data.svc." + z,
        "srv-payments": "_http._tcp.payments-north.shop.svc." + z,
        "srv-search": "_http._tcp.search-east.shop.svc." + z,
        "srv-reviews": "_http._tcp.reviews-south.shop.svc." + z,
        "srv-udp": "_http._udp.payments-north.shop.svc." + z,
        "nx": "nothing-north.shop.svc." + z,
        "wild": "*.shop.svc." + z,
        "ptr-v4": "1.20.20.10.in-addr.arpa",
        "ptr-v4-pod": "10.30.10.10.in-addr.arpa",
        "ptr-v4-partial": "20.10.in-addr.arpa",
        "ptr-v6": ".".join(reversed("fd00004000000000000000000020" "0001")) + ".ip6.arpa",
        "refused": "example.com",
        "root": "",
    }
    for label, name in names.items():
        for t in ["A", "AAAA", "SRV", "ANY"]:
            write("packet", f"q-{label}-{t}", query(name, T[t]))
        write("packet", f"q-{label}-A-noedns", query(name, T["A"], edns=None))
    for label in ["apex", "ns", "version", "ns-shop", "payments-north", "db-fed", "db-0-north",
                  "srv-peer", "nx", "ptr-v4", "ptr-v4-pod", "ptr-v6", "refused"]:
        for t in ["PTR", "SOA", "NS", "TXT"]:
            write("packet", f"q-{label}-{t}", query(names[label], T[t]))
    for t in ["AXFR", "IXFR", "MX", "CNAME", "HTTPS", "OPT", "TYPE0", "TYPE65535"]:
        write("packet", f"q-payments-{t}", query(names["payments-north"], T[t]))
    write("packet", "q-apex-AXFR-noedns", query(z, T["AXFR"], edns=None))
    # Sizes: the search-east SRV set is too big for 512 and for 1232.
    for size in [0, 511, 512, 513, 1232, 1400, 4096, 65535]:
        for label in ["search-east", "srv-search", "srv-peer"]:
            t = T["SRV"] if label.startswith("srv") else T["A"]
            write("packet", f"size-{label}-{size}", query(names[label], t, edns=opt(size)))
    write("packet", "size-search-noedns", query(names["search-east"], T["A"], edns=None))
    # 0x20 case, DO bit, CD, class ANY/CH/NONE.
    write("packet", "case-0x20", query("PaYmEnTs-NoRtH.sHoP.SvC.ClUsTeRsEt.LoCaL", T["A"]))
    write("packet", "case-srv", query("_HTTP._TCP.Search-East.shop.svc.CLUSTERSET.local", T["SRV"]))
    write("packet", "do-bit", query(names["api-south"], T["AAAA"], edns=opt(do=True)))
    write("packet", "cd-ad-bits", query(names["api-south"], T["A"], flags=0x0130))
    for cls, v in [("any", 255), ("ch", 3), ("none", 254), ("hs", 4)]:
        write("packet", f"class-{cls}", query(names["cache-fed"], T["A"], qclass=v))
    write("packet", "chaos-version", query("version.bind", T["TXT"], qclass=3))
    # Opcodes and header bits.
    for op, v in [("iquery", 1), ("status", 2), ("notify", 4), ("update", 5), ("op15", 15)]:
        write("packet", f"opcode-{op}", query(names["payments-north"], T["SOA"], flags=v << 11))
    write("packet", "qr-response", query(names["payments-north"], T["A"], flags=0x8100))
    write("packet", "tc-in-query", query(names["payments-north"], T["A"], flags=0x0300))
    write("packet", "rcode-in-query", query(names["payments-north"], T["A"], flags=0x010f))
    # EDNS: versions, options, ext rcode, oversize option, two OPTs.
    cookie = struct.pack(">HH", 10, 8) + b"\x01\x02\x03\x04\x05\x06\x07\x08"
    ecs = struct.pack(">HHHBB", 8, 7, 1, 24, 0) + b"\x0a\x14\x14"
    nsid = struct.pack(">HH", 3, 0)
    pad = struct.pack(">HH", 12, 16) + b"\0" * 16
    ede = struct.pack(">HH", 15, 2) + b"\x00\x11"
    write("packet", "edns-cookie", query(names["payments-north"], T["A"], edns=opt(options=cookie)))
    write("packet", "edns-ecs", query(names["payments-north"], T["A"], edns=opt(options=ecs)))
    write("packet", "edns-nsid-pad", query(names["cache-fed"], T["A"], edns=opt(options=nsid + pad)))
    write("packet", "edns-all", query(names["srv-peer"], T["SRV"],
                                      edns=opt(4096, do=True, options=cookie + ecs + nsid + ede)))
    write("packet", "edns-option-overrun", query(names["payments-north"], T["A"],
                                                 edns=opt(options=struct.pack(">HH", 10, 40) + b"x")))
    write("packet", "edns-option-short", query(names["payments-north"], T["A"],
                                               edns=opt(options=b"\x00\x0a\x00")))
    write("packet", "edns-v1", query(names["payments-north"], T["A"], edns=opt(version=1)))
    write("packet", "edns-v255-notify", query(names["payments-north"], T["A"], flags=4 << 11,
                                              edns=opt(version=255)))
    write("packet", "edns-ext-rcode", query(names["payments-north"], T["A"], edns=opt(ext_rcode=1)))
    write("packet", "edns-z-bits", query(names["payments-north"], T["A"],
                                         edns=b"\0\x00\x29\x04\xd0\x00\x00\x7f\xff\x00\x00"))
    q = name_wire(names["payments-north"]) + struct.pack(">HH", 1, 1)
    write("packet", "edns-two-opts", header(ar=2) + q + opt() + opt(4096))
    write("packet", "edns-owner-not-root",
          header(ar=1) + q + name_wire("x") + opt()[1:])
    write("packet", "edns-owner-pointer",
          header(ar=1) + q + b"\xc0\x0c" + opt()[1:])
    write("packet", "edns-in-answer", header(an=1) + q + opt())
    write("packet", "edns-truncated", header(ar=1) + q + opt()[:7])
    write("packet", "edns-before-other", header(ar=2) + q + opt() +
          name_wire("x") + struct.pack(">HHIH", 16, 1, 0, 2) + b"\x01y")
    write("packet", "tsig-like", header(ar=1) + q + name_wire("key") +
          struct.pack(">HHIH", 250, 255, 0, 4) + b"abcd")
    # Counts that lie, question oddities.
    write("packet", "qd0", header(qd=0))
    write("packet", "qd0-edns", header(qd=0, ar=1) + opt())
    write("packet", "qd2", header(qd=2, ar=0) + q + q)
    write("packet", "qd-over", header(qd=5) + q)
    write("packet", "an-over", header(an=3) + q)
    write("packet", "ar-over", header(ar=9) + q + opt())
    write("packet", "ancount-with-record", header(an=1) + q + b"\xc0\x0c" +
          struct.pack(">HHIH", 1, 1, 5, 4) + b"\x0a\x00\x00\x01")
    write("packet", "nscount-soa", header(ns=1) + q + b"\xc0\x0c" +
          struct.pack(">HHIH", 6, 1, 5, 2) + b"\0\0")
    write("packet", "trailing-garbage", query(names["payments-north"], T["A"]) + b"\xde\xad\xbe\xef")
    write("packet", "question-truncated", query(names["payments-north"], T["A"], edns=None)[:-3])
    write("packet", "question-no-type", header() + name_wire(names["payments-north"]))
    write("packet", "header-only", header())
    write("packet", "runt-11", header()[:11])
    write("packet", "empty", b"")
    # Names: pointers, loops, label types, lengths.
    write("packet", "q-pointer", header() + b"\xc0\x0c" + struct.pack(">HH", 1, 1))
    write("packet", "q-pointer-forward", header() + b"\x01a\xc0\x12" + struct.pack(">HH", 1, 1) +
          name_wire(z))
    write("packet", "q-pointer-loop", header() + b"\x01a\xc0\x0c" + struct.pack(">HH", 1, 1))
    write("packet", "ar-pointer-loop", header(ar=1) + q + b"\xc0\x00\x00\x01\x00\x01\0\0\0\0\0\0")
    write("packet", "q-label-ext-0x40", header() + b"\x41" + b"a" * 1 + b"\0" + struct.pack(">HH", 1, 1))
    write("packet", "q-label-ext-0x80", header() + b"\x80\x01" + b"\0" + struct.pack(">HH", 1, 1))
    write("packet", "q-label-63", query("a" * 63 + ".shop.svc." + z, T["A"]))
    write("packet", "q-label-64", header(ar=1) + b"\x40" + b"a" * 64 + name_wire(z) +
          struct.pack(">HH", 1, 1) + opt())
    long_name = ".".join(["a" * 63] * 3 + ["b" * 61])
    write("packet", "q-name-255", query(long_name, T["A"]))
    write("packet", "q-name-256", query(long_name + "c", T["A"]))
    write("packet", "q-name-300", query(".".join(["abcdefghij"] * 28), T["A"]))
    write("packet", "q-many-labels", query(".".join(["a"] * 127), T["A"]))
    write("packet", "q-dot-in-label", header(ar=1) + b"\x0dpayments.north" + name_wire("shop.svc." + z) +
          struct.pack(">HH", 1, 1) + opt())
    write("packet", "q-binary-label", header() + b"\x04\x00\xff\x2e\x20" + name_wire(z) +
          struct.pack(">HH", 1, 1))
    write("packet", "q-empty-label", header() + b"\x00" + b"\x01a\x00" + struct.pack(">HH", 1, 1))
    write("packet", "q-underscore", query("_tcp.payments-north.shop.svc." + z, T["SRV"]))
    write("packet", "q-deep-ptr", query("1.2.3.4.5.10.in-addr.arpa", T["PTR"]))
    write("packet", "q-ptr-bad-octet", query("300.20.20.10.in-addr.arpa", T["PTR"]))
    write("packet", "q-ptr-leading-zero", query("01.20.20.10.in-addr.arpa", T["PTR"]))
    # TCP: what a TCP client sends, length prefix included (the server strips
    # it; here it makes a message whose ID is the length).
    m = query(names["srv-search"], T["SRV"])
    write("packet", "tcp-prefixed", struct.pack(">H", len(m)) + m)
    write("packet", "tcp-two-messages", m + m)


def copy_files(target, paths, prefix):
    for p in paths:
        rel = os.path.relpath(p, ROOT).replace(os.sep, "_")
        with open(p, "rb") as f:
            write(target, prefix + rel, f.read())


def yaml_files(d):
    out = []
    for root, _, files in os.walk(d):
        for f in sorted(files):
            if f.endswith((".yaml", ".yml", ".json")):
                out.append(os.path.join(root, f))
    return sorted(out)


def zones_seeds():
    demo = yaml_files(os.path.join(ROOT, "zones", "demo"))
    copy_files("zones_file", demo, "")
    copy_files("zones_file", [os.path.join(ROOT, "zones", f)
                              for f in ("demo-links.yaml", "demo-namespaces.yaml")], "")
    copy_files("zones_file", yaml_files(os.path.join(ROOT, "tests", "fixtures")), "")
    text = {os.path.basename(os.path.dirname(p)) + "/" + os.path.basename(p): open(p).read()
            for p in demo}
    payments = text["north/payments.yaml"]
    db = text["east/db.yaml"]
    mirror = text["west/mirror-frontend-east.yaml"]
    # Edits: what the file watcher turns into events.
    edits = {
        "edit-payments-not-ready": (payments, payments.replace("ready: true", "ready: false", 1)),
        "edit-payments-unexport": (payments, payments.replace('"remote-discovery"', '"false"')),
        "edit-payments-port": (payments, payments.replace("8080", "8081")),
        "edit-db-remove-slice": (db, db.split("\n---")[0]),
        "edit-db-add": ("", db),
        "edit-db-delete": (db, ""),
        "edit-mirror-ip": (mirror, mirror.replace("10.96.20.1", "10.96.20.9")),
        "edit-gateway": ("#%remote\n" + text["east/linkerd-gateway.yaml"],
                         text["east/linkerd-gateway.yaml"].replace("203.0.113.10", "203.0.113.11")),
        "edit-all-to-list": (payments, "apiVersion: v1\nkind: List\nitems:\n" + "".join(
            "- " + doc.strip().replace("\n", "\n  ") + "\n"
            for doc in payments.split("\n---\n") if "apiVersion" in doc)),
    }
    # The same files read as a remote cluster's (`#%remote`).
    for key, body in text.items():
        if not key.startswith("west/"):
            write("zones_file", "remote-" + key.replace("/", "_"), ("#%remote\n" + body).encode())
    for name, (before, after) in edits.items():
        write("zones_file", name, (before.rstrip("\n") + "\n#%after\n" + after).encode())
    crafted = {
        "list-empty": "apiVersion: v1\nkind: List\nitems: []\n",
        "list-not-list": "apiVersion: v1\nkind: List\nitems: 3\n",
        "list-in-list": "apiVersion: v1\nkind: List\nitems:\n- apiVersion: v1\n  kind: List\n  items: []\n",
        "no-kind": "apiVersion: v1\nmetadata: {name: x}\n",
        "scalar": "just a string\n",
        "sequence": "- 1\n- 2\n",
        "json": '{"apiVersion":"v1","kind":"Service","metadata":{"name":"j","namespace":"shop",'
                '"labels":{"mirror.linkerd.io/exported":"remote-discovery"}},'
                '"spec":{"clusterIP":"None","ports":[{"name":"http","port":80}]}}\n',
        "invalid-yaml": "apiVersion: v1\nkind: Service\nmetadata: {name: [\n",
        "tabs": "apiVersion: v1\n\tkind: Service\n",
        "anchors": "apiVersion: v1\nkind: Service\nmetadata: &m {name: a, namespace: shop, labels: "
                   "{mirror.linkerd.io/exported: \"true\"}}\nspec: {ports: [{port: 80}]}\n---\n"
                   "apiVersion: v1\nkind: ConfigMap\nmetadata: *m\n",
        # Aliases expand (serde_saphyr stops at 250000 nodes, so a deeper
        # "billion laughs" is an error, but reaching that limit takes a
        # quarter second in the fuzz build: too slow for a seed).
        "aliases": "a: &a [x, x, x]\nb: &b [*a, *a, *a]\nc: [*b, *b, *b]\napiVersion: v1\nkind: List\n"
                   "items: [{apiVersion: v1, kind: Service, metadata: &m {name: a, namespace: b}}, "
                   "{apiVersion: v1, kind: Service, metadata: *m}]\n",
        "merge-key": "base: &b {apiVersion: v1, kind: Service}\n<<: *b\nmetadata: {name: m}\n",
        "deep-nesting": "a: " + "[" * 200 + "]" * 200 + "\n",
        "documents-markers": "---\n...\n--- {apiVersion: v1, kind: Service, metadata: {name: d}}\n...\n%YAML 1.2\n---\n",
        "bad-ports": "apiVersion: v1\nkind: Service\nmetadata: {name: p, namespace: shop, labels: "
                     "{mirror.linkerd.io/exported: remote-discovery}}\nspec: {ports: [{port: 70000, "
                     "name: \"UPPER\", protocol: SCTP}, {port: -1}]}\n",
        "slice-fqdn": "apiVersion: discovery.k8s.io/v1\nkind: EndpointSlice\nmetadata: {name: s, namespace: shop, "
                      "labels: {kubernetes.io/service-name: p}}\naddressType: FQDN\nendpoints: "
                      "[{addresses: [a.example.com], hostname: \"\"}]\nports: [{port: 0}]\n",
        "slice-bad-ip": "apiVersion: discovery.k8s.io/v1\nkind: EndpointSlice\nmetadata: {name: s, namespace: shop, "
                        "labels: {kubernetes.io/service-name: p}}\naddressType: IPv4\nendpoints: "
                        "[{addresses: [\"999.1.1.1\", \"fd00::1\"], hostname: \"UPPER_case\"}]\n",
        "long-names": "apiVersion: v1\nkind: Service\nmetadata: {name: " + "n" * 63 + ", namespace: " + "s" * 63 +
                      ", labels: {mirror.linkerd.io/exported: remote-discovery, mirror.linkerd.io/federated: member}}\n"
                      "spec: {clusterIP: None, ports: [{name: " + "p" * 15 + ", port: 1}]}\n",
        "not-utf8": "apiVersion: v1\nkind: Service\nmetadata: {name: \xff\xfe}\n",
    }
    for name, body in crafted.items():
        write("zones_file", name, body.encode("latin-1") if name == "not-utf8" else body.encode())
    write("zones_file", "bom-utf16", "\ufeffapiVersion: v1\nkind: Service\n".encode("utf-16"))


def config_seeds():
    deploy = open(os.path.join(ROOT, "deploy", "base", "config.yaml")).read()
    body = deploy.split("config.yaml: |\n", 1)[1]
    config = "\n".join(line[4:] for line in body.splitlines()) + "\n"
    write("config_file", "deploy-base-config", config.encode())
    write("config_file", "deploy-base-config-west", config.replace("CHANGE-ME", "west").encode())
    # The README's and the docs' YAML examples (configs and clusters files).
    docs = ["README.md"] + sorted(
        os.path.join("docs", f) for f in os.listdir(os.path.join(ROOT, "docs")) if f.endswith(".md"))
    i = 0
    for doc in docs:
        text = open(os.path.join(ROOT, doc)).read()
        for block in re.findall(r"```yaml\n(.*?)```", text, re.S):
            write("config_file", f"readme-{i}", block.encode())
            i += 1
    variants = {
        "zones-mode": "zones: /tmp/zones\nlocal-cluster: west\nzone: example.org\nttl: 0\nnegative-ttl: 3600\n"
                      "reverse-zone: [10.in-addr.arpa, 0.4.0.0.0.0.d.f.ip6.arpa]\nns-addr: [192.0.2.1, \"::1\"]\n",
        "live-mirror": "local-cluster: west\nmirror: true\nlinkerd-flat-compat: true\ncluster-domain: cluster.local\n"
                       "mirror-namespace: ops\nmirror-resync: 1h30m\nmax-stale: 1.5h\nfederated-grace: 250ms\n"
                       "sync-timeout: 90\n",
        "addresses": "local-cluster: a\ndns-addr: \"[::]:53\"\nadmin-addr: 0.0.0.0:9153\nanswer-cache-mb: 65536\n"
                     "log-format: json\n",
        "bad-durations": "local-cluster: a\nmax-stale: -1s\nfederated-grace: 9999999999999999999h\n",
        # Overflowed parse_go_duration before it was fixed.
        "duration-overflow": "local-cluster: a\nmax-stale: 340282366920938463463374607431.9s\n",
        "bad-ttl": "ttl: 3601\n",
        "unknown-key": "zones: /z\nnot-a-key: 1\n",
        "empty": "",
        "null": "~\n",
        "clusters": "- name: east\n  kubeconfig: east.kubeconfig\n- name: north\n  kubeconfig: /abs/north.kubeconfig\n"
                    "  context: north\n  selectors: {gateway: {}, remoteDiscovery: {matchExpressions: "
                    "[{key: a, operator: In, values: [b]}]}}\n  gateway: {addresses: [\"fd00::1\", gw.example.com], "
                    "port: 65535, identity: gw.linkerd, probe: {path: /, port: 1, period: 500ms, timeout: 1s, "
                    "failureThreshold: 3}}\n",
        "clusters-dup": "- {name: a, kubeconfig: k}\n- {name: a, kubeconfig: k}\n",
    }
    for name, body in variants.items():
        write("config_file", name, body.encode())


def main():
    if os.path.isdir(SEEDS):
        shutil.rmtree(SEEDS)
    packet_seeds()
    zones_seeds()
    config_seeds()
    for t in sorted(os.listdir(SEEDS)):
        print(t, len(os.listdir(os.path.join(SEEDS, t))), "seeds")


if __name__ == "__main__":
    main()
