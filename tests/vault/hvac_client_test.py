"""Debian's python3-hvac, unchanged, against a real `tessera server` (issue #37, item 3).

Run by tests/integration/vault_client_test.cc, which starts the server with
`tokens { max_ttl = MAX_TTL }` and passes, in the environment:
  VAULT_ADDR, VAULT_CACERT   the server's main listener and its CA
  TESSERA_ROOT_TOKEN         the server's root token
  TESSERA_MAX_TTL_S          the server's max_ttl in seconds (short, so that a periodic token
                             can be seen outliving it)
Each test uses its own tenant. Run with /usr/bin/python3 (hvac is Debian's, not pip's).
"""
import os
import time
import unittest

import hvac
import hvac.exceptions

ADDR = os.environ["VAULT_ADDR"]
CA = os.environ["VAULT_CACERT"]
ROOT = os.environ["TESSERA_ROOT_TOKEN"]
MAX_TTL_S = int(os.environ["TESSERA_MAX_TTL_S"])


def client(token, namespace=None):
    return hvac.Client(url=ADDR, token=token, verify=CA, namespace=namespace)


def make_tenant(name):
    """A tenant, made with Tessera's own API through hvac's adapter (Vault has no tenants)."""
    root = client(ROOT)
    root.adapter.post("/v1/tenants/" + name, json={})
    return root


def tenant_admin(name, **fields):
    """A tenant-admin token of tenant `name`, created by the root token in the tenant's
    namespace (X-Vault-Namespace), with hvac's create and every field it sends."""
    make_tenant(name)
    answer = client(ROOT, namespace=name).auth.token.create(
        policies=["tenant-admin"], **fields)
    return answer


class TokenCreate(unittest.TestCase):
    def test_vaults_fields_are_accepted_mapped_or_warned_never_refused(self):
        # hvac sends no_parent, no_default_policy, renewable, display_name and num_uses on
        # every create; these are the rest of Vault's fields.
        answer = tenant_admin(
            "vc-fields", ttl="1h", explicit_max_ttl="2h", meta={"team": "vision", "ci": "yes"},
            no_default_policy=True, num_uses=3, entity_alias="alice", type="service",
            display_name="ci-runner")
        auth = answer["auth"]
        self.assertTrue(auth["client_token"].startswith("tsr."), answer)
        self.assertEqual(auth["policies"], ["tenant-admin"])
        self.assertEqual(auth["token_policies"], ["tenant-admin"])
        self.assertEqual(auth["metadata"], {"team": "vision", "ci": "yes"})
        self.assertEqual(auth["renewable"], True)
        self.assertEqual(auth["orphan"], False)
        self.assertEqual(auth["token_type"], "service")
        self.assertGreater(auth["lease_duration"], 3500)
        self.assertLessEqual(auth["lease_duration"], 3600)
        warnings = " ".join(answer["warnings"])
        self.assertIn("num_uses", warnings)
        self.assertIn("entity_alias", warnings)
        # The token looks itself up from the admin root (no namespace): its tenant and fields.
        me = client(auth["client_token"]).auth.token.lookup_self()["data"]
        self.assertEqual(me["tenant"], "vc-fields")
        self.assertEqual(me["display_name"], "ci-runner")
        self.assertEqual(me["meta"], {"team": "vision", "ci": "yes"})
        self.assertEqual(me["explicit_max_ttl"], 7200)
        self.assertEqual(me["accessor"], auth["accessor"])

    def test_unknown_parameters_are_reported_as_vault_reports_them(self):
        make_tenant("vc-unknown")
        root = client(ROOT, namespace="vc-unknown")
        answer = root.adapter.post("/v1/auth/token/create",
                                   json={"policies": ["tenant-admin"], "ttl": "10m",
                                         "bogus_field": 1, "type": "batch"})
        self.assertIn("client_token", answer["auth"])
        warnings = " ".join(answer["warnings"])
        self.assertIn("Endpoint ignored these unrecognized parameters: [bogus_field]", warnings)
        self.assertIn("batch tokens are not supported", warnings)
        # A value of the wrong type is still the caller's mistake, said where.
        with self.assertRaises(hvac.exceptions.InvalidRequest) as bad:
            root.adapter.post("/v1/auth/token/create",
                              json={"policies": ["tenant-admin"], "meta": {"k": 5}})
        self.assertIn("meta.k", str(bad.exception))

    def test_orphans_need_root_and_survive_their_creator(self):
        admin = tenant_admin("vc-orphan", ttl="1h")["auth"]["client_token"]
        as_admin = client(admin, namespace="vc-orphan")
        with self.assertRaises(hvac.exceptions.Forbidden) as refused:
            as_admin.auth.token.create(policies=["tenant-admin"], no_parent=True)
        self.assertIn("no_parent", str(refused.exception))
        child = as_admin.auth.token.create(policies=["tenant-admin"], ttl="1h")["auth"]
        orphan = client(ROOT, namespace="vc-orphan").auth.token.create(
            policies=["tenant-admin"], ttl="1h", no_parent=True)["auth"]
        self.assertTrue(orphan["orphan"])
        self.assertFalse(child["orphan"])
        # Revoking the admin revokes its child, not the orphan (made by root, not by it).
        as_admin.auth.token.revoke_self()
        with self.assertRaises(hvac.exceptions.Forbidden):
            client(child["client_token"]).auth.token.lookup_self()
        self.assertEqual(
            client(orphan["client_token"]).auth.token.lookup_self()["data"]["orphan"], True)


class SelfOperations(unittest.TestCase):
    def test_a_tenant_token_renews_and_revokes_itself_at_the_admin_root(self):
        token = tenant_admin("vc-self", ttl="10m")["auth"]["client_token"]
        me = client(token)  # No namespace: the paths hvac knows, at the admin root.
        self.assertEqual(me.auth.token.lookup_self()["data"]["tenant"], "vc-self")
        self.assertTrue(me.is_authenticated())
        renewed = me.auth.token.renew_self(increment="30m")
        self.assertGreater(renewed["auth"]["lease_duration"], 1700)
        self.assertLessEqual(renewed["auth"]["lease_duration"], 1800)
        self.assertEqual(renewed["auth"]["renewable"], True)
        self.assertEqual(renewed["auth"]["accessor"],
                         me.auth.token.lookup_self()["data"]["accessor"])
        # The same token renewed by its secret, as Vault's auth/token/renew takes it.
        by_secret = client(ROOT, namespace="vc-self").auth.token.renew(token, increment="20m")
        self.assertLessEqual(by_secret["auth"]["lease_duration"], 1200)
        # Nothing else of the admin root opens to it.
        with self.assertRaises(hvac.exceptions.InvalidPath):
            me.adapter.get("/v1/nodes")
        me.auth.token.revoke_self()
        with self.assertRaises(hvac.exceptions.Forbidden):
            me.auth.token.lookup_self()
        self.assertFalse(me.is_authenticated())

    def test_accessor_operations_use_vaults_paths(self):
        token = tenant_admin("vc-accessor", ttl="10m")["auth"]
        admin = client(token["client_token"], namespace="vc-accessor")
        child = admin.auth.token.create(policies=["tenant-admin"], ttl="5m")["auth"]
        looked = admin.auth.token.lookup_accessor(child["accessor"])["data"]
        self.assertEqual(looked["accessor"], child["accessor"])
        self.assertNotIn(child["client_token"], str(looked))  # Never the secret.
        renewed = admin.auth.token.renew_accessor(child["accessor"], increment="8m")
        self.assertGreater(renewed["auth"]["lease_duration"], 400)
        admin.auth.token.revoke_accessor(child["accessor"])
        with self.assertRaises(hvac.exceptions.Forbidden):
            client(child["client_token"]).auth.token.lookup_self()


class Namespaces(unittest.TestCase):
    def test_the_namespace_header_is_the_tenants_scope(self):
        token = tenant_admin("vc-ns-a", ttl="10m")["auth"]["client_token"]
        make_tenant("vc-ns-b")
        mine = client(token, namespace="vc-ns-a")
        mine.secrets.kv.v2.create_or_update_secret(
            path="app/db", secret={"password": "s3cret"}, mount_point="secrets/kv")
        # The same secret through the path, without the header.
        plain = client(token)
        read = plain.secrets.kv.v2.read_secret_version(
            path="app/db", mount_point="tenants/vc-ns-a/secrets/kv")
        self.assertEqual(read["data"]["data"], {"password": "s3cret"})
        # Another tenant's namespace is as invisible as its path.
        with self.assertRaises(hvac.exceptions.InvalidPath):
            client(token, namespace="vc-ns-b").secrets.kv.v2.read_secret_version(
                path="app/db", mount_point="secrets/kv")
        # Tessera's namespaces are one level deep: a nested one is refused, saying why.
        with self.assertRaises(hvac.exceptions.InvalidRequest) as nested:
            client(token, namespace="vc-ns-a/child").auth.token.lookup_self()
        self.assertIn("X-Vault-Namespace", str(nested.exception))


class KvV2(unittest.TestCase):
    def test_kv_v2_end_to_end(self):
        token = tenant_admin("vc-kv", ttl="10m")["auth"]["client_token"]
        kv = client(token, namespace="vc-kv").secrets.kv.v2
        m = "secrets/kv"
        v1 = kv.create_or_update_secret(path="svc/api", secret={"key": "one"}, mount_point=m)
        self.assertEqual(v1["data"]["version"], 1)
        kv.create_or_update_secret(path="svc/api", secret={"key": "two"}, cas=1, mount_point=m)
        with self.assertRaises(hvac.exceptions.InvalidRequest):
            kv.create_or_update_secret(path="svc/api", secret={"key": "x"}, cas=1, mount_point=m)
        kv.patch(path="svc/api", secret={"extra": "3"}, mount_point=m)
        latest = kv.read_secret_version(path="svc/api", mount_point=m)["data"]
        self.assertEqual(latest["data"], {"key": "two", "extra": "3"})
        self.assertEqual(latest["metadata"]["version"], 3)
        old = kv.read_secret_version(path="svc/api", version=1, mount_point=m)["data"]
        self.assertEqual(old["data"], {"key": "one"})
        self.assertEqual(kv.list_secrets(path="svc", mount_point=m)["data"]["keys"], ["api"])
        meta = kv.read_secret_metadata(path="svc/api", mount_point=m)["data"]
        self.assertEqual(meta["current_version"], 3)
        kv.delete_latest_version_of_secret(path="svc/api", mount_point=m)
        with self.assertRaises(hvac.exceptions.InvalidPath):
            kv.read_secret_version(path="svc/api", mount_point=m)
        kv.undelete_secret_versions(path="svc/api", versions=[3], mount_point=m)
        self.assertEqual(kv.read_secret_version(path="svc/api", mount_point=m)["data"]["data"],
                         {"key": "two", "extra": "3"})
        kv.destroy_secret_versions(path="svc/api", versions=[1], mount_point=m)
        with self.assertRaises(hvac.exceptions.InvalidPath):
            kv.read_secret_version(path="svc/api", version=1, mount_point=m)
        kv.delete_metadata_and_all_versions(path="svc/api", mount_point=m)
        with self.assertRaises(hvac.exceptions.InvalidPath):
            kv.read_secret_metadata(path="svc/api", mount_point=m)


class PeriodicTokens(unittest.TestCase):
    def test_a_periodic_token_outlives_max_ttl_while_renewed_and_dies_when_not(self):
        make_tenant("vc-period")
        root = client(ROOT, namespace="vc-period")
        period = 3
        periodic = root.auth.token.create(policies=["tenant-admin"], period="%ds" % period,
                                          display_name="prometheus")["auth"]
        self.assertEqual(periodic["lease_duration"], period)
        self.assertEqual(periodic["period"], period)
        # A plain token made at the same moment with the longest TTL there is: the server's
        # max_ttl, which no renewal passes.
        plain = root.auth.token.create(policies=["tenant-admin"],
                                       ttl="%ds" % MAX_TTL_S)["auth"]
        me = client(periodic["client_token"])
        start = time.monotonic()
        while time.monotonic() - start < MAX_TTL_S + period:
            renewed = me.auth.token.renew_self(increment="1h")  # Vault ignores it: the period.
            self.assertLessEqual(renewed["auth"]["lease_duration"], period)
            time.sleep(1)
        # Past max_ttl: the plain token is gone, the periodic one is alive.
        with self.assertRaises(hvac.exceptions.Forbidden):
            client(plain["client_token"]).auth.token.lookup_self()
        data = me.auth.token.lookup_self()["data"]
        self.assertEqual(data["period"], period)
        self.assertIsNone(data["explicit_max_ttl_time"])
        # Not renewed within its period: it expires, for good.
        time.sleep(period + 1)
        with self.assertRaises(hvac.exceptions.Forbidden):
            me.auth.token.lookup_self()
        with self.assertRaises(hvac.exceptions.Forbidden):
            me.auth.token.renew_self()

    def test_a_role_with_a_period_makes_service_tokens(self):
        admin = tenant_admin("vc-role", ttl="10m")["auth"]["client_token"]
        as_admin = client(admin, namespace="vc-role")
        # hvac 0.11's create_or_update_role has no token_period: its adapter posts Vault's body.
        written = as_admin.adapter.post(
            "/v1/auth/token/roles/scraper",
            json={"allowed_policies": ["tenant-admin"], "token_period": "24h", "orphan": False})
        self.assertEqual(written.status_code, 204)
        role = as_admin.auth.token.read_role("scraper")["data"]
        self.assertEqual(role["token_period"], 86400)
        made = as_admin.auth.token.create(role_name="scraper")["auth"]
        self.assertEqual(made["period"], 86400)
        # Never longer than the creating token has left (10 min), period or not.
        self.assertLessEqual(made["lease_duration"], 600)


if __name__ == "__main__":
    unittest.main(verbosity=2)
