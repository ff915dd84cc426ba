"""The official Kubernetes Python client (Debian's python3-kubernetes) against a tenant's
Kubernetes API, as a user's script runs it: create, list, watch (watch=True), read logs,
delete. Run by kube_integration_test with KUBECONFIG set to a kubeconfig from
`tessera kubeconfig`; each case says what it checks and fails loudly otherwise."""

import time
import unittest

from kubernetes import client, config, watch

NS = "default"


def pod(name, command, labels=None):
    return client.V1Pod(
        metadata=client.V1ObjectMeta(name=name, labels=labels or {}),
        spec=client.V1PodSpec(
            restart_policy="Never",
            containers=[
                client.V1Container(
                    name="main",
                    command=command,
                    resources=client.V1ResourceRequirements(limits={"nvidia.com/gpu": "1"}),
                )
            ],
        ),
    )


class PythonClient(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        config.load_kube_config()
        cls.v1 = client.CoreV1Api()

    def test_create_list_watch_logs_delete(self):
        created = self.v1.create_namespaced_pod(
            NS, pod("py-trainer", ["sh", "-c", "echo from python; sleep 1"], {"app": "py"})
        )
        self.assertEqual(created.metadata.name, "py-trainer")
        self.assertEqual(created.status.phase, "Pending")
        self.assertTrue(created.metadata.uid)

        listed = self.v1.list_namespaced_pod(NS, label_selector="app=py")
        self.assertEqual([p.metadata.name for p in listed.items], ["py-trainer"])
        self.assertTrue(int(listed.metadata.resource_version) > 0)

        # watch=True (the client spells it "True"): the current state first, then changes,
        # until it has succeeded.
        phases = []
        w = watch.Watch()
        for event in w.stream(
            self.v1.list_namespaced_pod,
            NS,
            field_selector="metadata.name=py-trainer",
            timeout_seconds=30,
        ):
            phases.append((event["type"], event["object"].status.phase))
            if event["object"].status.phase == "Succeeded":
                w.stop()
        self.assertEqual(phases[0][0], "ADDED", phases)
        self.assertEqual(phases[-1], ("MODIFIED", "Succeeded"), phases)

        log = self.v1.read_namespaced_pod_log("py-trainer", NS, container="main")
        self.assertEqual(log, "from python\n")

        self.v1.delete_namespaced_pod("py-trainer", NS)
        deadline = time.time() + 20
        while time.time() < deadline:
            names = [p.metadata.name for p in self.v1.list_namespaced_pod(NS).items]
            if "py-trainer" not in names:
                break
            time.sleep(0.2)
        self.assertNotIn("py-trainer", names)
        with self.assertRaises(client.exceptions.ApiException) as gone:
            self.v1.read_namespaced_pod("py-trainer", NS)
        self.assertEqual(gone.exception.status, 404)

    def test_a_job_is_polled_by_its_status_until_it_completes(self):
        # The usual script: create a Job with BatchV1Api, poll read_namespaced_job_status (the
        # status subresource) until it succeeds, read its pod's status and log, delete it.
        batch = client.BatchV1Api()
        job = client.V1Job(
            metadata=client.V1ObjectMeta(name="py-job"),
            spec=client.V1JobSpec(
                backoff_limit=0,
                template=client.V1PodTemplateSpec(spec=pod("x", ["sh", "-c", "echo job"]).spec),
            ),
        )
        created = batch.create_namespaced_job(NS, job)
        self.assertEqual(created.spec.backoff_limit, 0)
        deadline = time.time() + 30
        status = None
        while time.time() < deadline:
            status = batch.read_namespaced_job_status("py-job", NS).status
            if status.succeeded or status.failed:
                break
            time.sleep(0.2)
        self.assertEqual(status.succeeded, 1, status)
        self.assertIn("Complete", [c.type for c in status.conditions])
        pods = self.v1.list_namespaced_pod(NS, label_selector="job-name=py-job").items
        self.assertEqual(len(pods), 1)
        name = pods[0].metadata.name
        self.assertEqual(self.v1.read_namespaced_pod_status(name, NS).status.phase, "Succeeded")
        self.assertEqual(self.v1.read_namespaced_pod_log(name, NS), "job\n")
        batch.delete_namespaced_job("py-job", NS, propagation_policy="Foreground")
        with self.assertRaises(client.exceptions.ApiException) as gone:
            batch.read_namespaced_job_status("no-such-job", NS)
        self.assertEqual(gone.exception.status, 404)

    def test_errors_are_api_exceptions_with_kubernetes_reasons(self):
        with self.assertRaises(client.exceptions.ApiException) as missing:
            self.v1.read_namespaced_pod("no-such-pod", NS)
        self.assertEqual(missing.exception.status, 404)
        self.assertIn('"reason":"NotFound"', missing.exception.body.replace(" ", ""))
        bad = pod("py-bad", ["true"])
        bad.spec.host_network = True
        with self.assertRaises(client.exceptions.ApiException) as invalid:
            self.v1.create_namespaced_pod(NS, bad)
        self.assertEqual(invalid.exception.status, 422)
        self.assertIn("spec.hostNetwork", invalid.exception.body)


if __name__ == "__main__":
    unittest.main()
