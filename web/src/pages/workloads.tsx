import { useEffect, useRef, useState } from 'preact/hooks';
import { call, encPath, get, tenantPath } from '../api';
import { ago, errorText, usePoll, useWatch, whenVisible } from '../util';
import { href } from '../app';
import { ErrorBox, Loading, PageHead, Phase } from './common';

interface Task { node?: string; gpus?: number[]; state?: string; mig?: string; milli_per_gpu?: number; starts?: number; started_at?: string }
interface Workload {
  name: string;
  spec: Record<string, any>;
  status: { phase: string; reason?: string; tasks?: Task[] };
  submitted?: string;
}
interface Event { event: string; time: string; reason?: string; detail?: string; [k: string]: unknown }

// The tenant's workloads, each as GET shows it, in one request (`detail=true`), long-polled:
// the server answers when any of them changes (`index`), or after 4 min with `unchanged`.
function watchWorkloads(tenant: string) {
  return async (index: number): Promise<{ value?: Workload[]; index: number }> => {
    const wait = index >= 0 ? `&index=${index}&wait=240s` : '';
    const d = (await get<{ data: { keys?: string[]; workloads?: Workload[]; index?: number; unchanged?: boolean } }>(
      tenantPath(tenant, `workloads?list=true&detail=true${wait}`))).data;
    return { value: d.unchanged ? undefined : d.workloads ?? [], index: d.index ?? -1 };
  };
}

export function WorkloadList({ tenant }: { tenant: string }) {
  const { data, error, status } = useWatch(watchWorkloads(tenant), [tenant]);
  return (
    <div>
      <PageHead title={`Workloads · ${tenant}`}>
        <a class="btn primary" href={href(tenant, 'submit')}>Submit a workload</a>
      </PageHead>
      <ErrorBox error={error} status={status} />
      {!data && !error && <Loading />}
      {data && data.length === 0 && <div class="empty">No workloads yet.</div>}
      {data && data.length > 0 && (
        <div class="card"><table class="table" id="workloads-table">
          <thead><tr><th>Name</th><th>Phase</th><th>Tasks</th><th>GPU</th><th>Where</th><th>Reason</th><th>Submitted</th></tr></thead>
          <tbody>
            {data.map((w) => (
              <tr data-workload={w.name}>
                <WorkloadCells tenant={tenant} w={w} />
                <td class="muted">{ago(w.submitted)}</td>
              </tr>
            ))}
          </tbody>
        </table></div>
      )}
    </div>
  );
}

// Every tenant's workloads, for an operator (as `tessera ps -A`): the tenants, then each one's
// list in one request, every 15 s while the tab is shown.
export function AllWorkloads() {
  const { data, error, status } = usePoll(async () => {
    const tenants = (await get<{ data: { keys: string[] } }>('/v1/tenants?list=true')).data.keys ?? [];
    const lists = await Promise.all(tenants.map((t) =>
      get<{ data: { workloads?: Workload[] } }>(tenantPath(t, 'workloads?list=true&detail=true'))
        .then((d) => (d.data.workloads ?? []).map((w) => ({ ...w, tenant: t })))
        .catch(() => [] as (Workload & { tenant: string })[])));
    return lists.flat();
  }, 15000);
  return (
    <div>
      <PageHead title="All workloads" />
      <ErrorBox error={error} status={status} />
      {!data && !error && <Loading />}
      {data && data.length === 0 && <div class="empty">No workloads in any tenant.</div>}
      {data && data.length > 0 && (
        <div class="card"><table class="table" id="all-workloads-table">
          <thead><tr><th>Tenant</th><th>Name</th><th>Phase</th><th>Tasks</th><th>GPU</th><th>Where</th><th>Reason</th></tr></thead>
          <tbody>
            {data.map((w) => (
              <tr data-tenant={w.tenant} data-workload={w.name}>
                <td>{w.tenant}</td>
                <WorkloadCells tenant={w.tenant} w={w} />
              </tr>
            ))}
          </tbody>
        </table></div>
      )}
    </div>
  );
}

// A workload's row in a list: name (a link), phase, tasks running, GPU, nodes, reason.
function WorkloadCells({ tenant, w }: { tenant: string; w: Workload }) {
  const tasks = w.status.tasks ?? [];
  const running = tasks.filter((t) => t.state === 'running').length;
  return (
    <>
      <td><a href={href(tenant, 'workloads', w.name)}>{w.name}</a></td>
      <td><Phase phase={w.status.phase} /></td>
      <td>{running}/{tasks.length || w.spec.tasks || 1}</td>
      <td>{gpuSpec(w.spec.gpu)}</td>
      <td class="mono">{[...new Set(tasks.map((t) => t.node).filter(Boolean))].join(', ')}</td>
      <td class="reason">{w.status.reason ?? ''}</td>
    </>
  );
}

function gpuSpec(g: any): string {
  if (!g) return '—';
  if (g.mig) return `${g.count ?? 1}× MIG ${g.mig}`;
  if (g.milli && g.milli < 1000) return `${g.count ?? 1}× ${g.milli / 1000} GPU`;
  return `${g.count ?? 0} GPU`;
}

export function WorkloadDetail({ tenant, name }: { tenant: string; name: string }) {
  const base = tenantPath(tenant, `workloads/${encPath(name)}`);
  // Reads this one and its events; then waits on the tenant's workloads (the list's long poll)
  // until something changed before reading them again.
  const { data, error, status } = useWatch(async (index: number) => {
    if (index >= 0) {
      const list = await watchWorkloads(tenant)(index);
      if (list.value === undefined) return { index: list.index };  // Nothing changed.
    }
    const [w, ev] = await Promise.all([
      get<{ data: Workload & { index?: number } }>(base),
      get<{ data: { events: Event[] } }>(`${base}/events`),
    ]);
    return { value: { w: w.data, events: ev.data.events ?? [] }, index: w.data.index ?? -1 };
  }, [tenant, name]);
  const [actionError, setActionError] = useState('');
  const cancel = async () => {
    if (!confirm(`Cancel workload ${name}?`)) return;
    try {
      await call('DELETE', base);
    } catch (e) {
      setActionError(errorText(e));
    }
  };
  const w = data?.w;
  const finished = w && ['succeeded', 'cancelled', 'failed'].includes(w.status.phase);
  return (
    <div>
      <PageHead title={`Workload ${name}`}>
        <a class="btn ghost" href={href(tenant, 'workloads')}>All workloads</a>
        {w && !finished && <button class="btn danger" onClick={cancel}>Cancel</button>}
      </PageHead>
      <ErrorBox error={error || actionError} status={error ? status : undefined} />
      {!data && !error && <Loading />}
      {w && (
        <div class="grid2">
          <div class="card">
            <h2>Status</h2>
            <dl class="kv">
              <dt>Phase</dt><dd id="workload-phase"><Phase phase={w.status.phase} /></dd>
              {w.status.reason && <><dt>Reason</dt><dd class="reason">{w.status.reason}</dd></>}
              <dt>Submitted</dt><dd>{w.submitted} <span class="muted">({ago(w.submitted)})</span></dd>
              <dt>GPU</dt><dd>{gpuSpec(w.spec.gpu)}</dd>
              <dt>Queue</dt><dd>{w.spec.queue ?? 'default'}</dd>
              <dt>Command</dt><dd class="mono">{(w.spec.command ?? ['(sleep for its duration)']).join(' ')}</dd>
            </dl>
            <h3>Tasks</h3>
            <table class="table compact">
              <thead><tr><th>#</th><th>State</th><th>Node</th><th>GPUs</th><th>Share</th><th>Starts</th></tr></thead>
              <tbody>
                {(w.status.tasks ?? []).map((t, i) => (
                  <tr><td>{i}</td><td>{t.state ?? '—'}</td><td class="mono">{t.node ?? '—'}</td>
                    <td class="mono">{(t.gpus ?? []).join(', ')}</td>
                    <td>{t.mig ? `MIG ${t.mig}` : t.milli_per_gpu ? `${t.milli_per_gpu / 1000} GPU` : 'whole'}</td>
                    <td>{t.starts ?? 0}</td></tr>
                ))}
              </tbody>
            </table>
          </div>
          <div class="card">
            <h2>Events</h2>
            <table class="table compact" id="events-table">
              <thead><tr><th>Time</th><th>Event</th><th>Why</th></tr></thead>
              <tbody>
                {data!.events.map((e) => (
                  <tr class={e.event === 'evicted' ? 'evicted' : ''}>
                    <td class="mono nowrap">{e.time}</td><td>{e.event}</td>
                    <td class="reason">{String(e.reason ?? e.detail ?? e.message ?? '')}</td>
                  </tr>
                ))}
              </tbody>
            </table>
          </div>
        </div>
      )}
      {w && <Logs base={base} tasks={w.status.tasks ?? []} phase={w.status.phase} />}
    </div>
  );
}

// A task's log, followed: each poll asks for what came after the last offset. Only a task that
// ran on an agent's node has a log; a finished one is read to its end once, not polled.
function Logs({ base, tasks: list, phase }: { base: string; tasks: Task[]; phase: string }) {
  const tasks = list.length || 1;
  const [task, setTask] = useState(0);
  const [stream, setStream] = useState<'stdout' | 'stderr'>('stdout');
  const [follow, setFollow] = useState(true);
  const [text, setText] = useState('');
  const [error, setError] = useState('');
  const offset = useRef(0);
  const pre = useRef<HTMLPreElement>(null);
  const node = list[task]?.node ?? '';
  const live = phase === 'running';
  useEffect(() => {
    offset.current = 0;
    setText('');
    setError('');
    let stopped = false;
    let timer = 0;
    const tick = async () => {
      await whenVisible();
      if (stopped) return;
      let more = false;
      try {
        const d = await get<{ data: { text: string; next_offset: number; size?: number } }>(
          `${base}/logs?task=${task}&stream=${stream}&offset=${offset.current}&limit=65536`);
        if (stopped) return;
        offset.current = d.data.next_offset;
        if (d.data.text) setText((t) => (t + d.data.text).slice(-200000));
        more = d.data.size !== undefined && d.data.next_offset < d.data.size;
        setError('');
      } catch (e) {
        if (!stopped) setError(errorText(e));
      }
      // A running task's log grows: followed every 2 s. A finished one is read to its end.
      if (!stopped && (more || (follow && live))) timer = window.setTimeout(tick, more ? 0 : 2000);
    };
    if (node) void tick();
    return () => { stopped = true; window.clearTimeout(timer); };
  }, [base, task, stream, follow, node, live]);
  useEffect(() => {
    if (follow && pre.current) pre.current.scrollTop = pre.current.scrollHeight;
  }, [text]);
  return (
    <div class="card">
      <div class="pagehead small">
        <h2>Logs</h2>
        <div class="actions">
          <select value={task} onChange={(e) => setTask(Number((e.target as HTMLSelectElement).value))}>
            {Array.from({ length: tasks }, (_, i) => <option value={i}>task {i}</option>)}
          </select>
          <select value={stream} onChange={(e) => setStream((e.target as HTMLSelectElement).value as 'stdout' | 'stderr')}>
            <option value="stdout">stdout</option><option value="stderr">stderr</option>
          </select>
          <label class="check"><input type="checkbox" checked={follow} onChange={(e) => setFollow((e.target as HTMLInputElement).checked)} /> follow</label>
        </div>
      </div>
      {!node ? <div class="muted">{phase === 'pending' ? 'No log yet: the workload is pending.' : 'No log: this task did not run on an agent\'s node.'}</div> : (
        <>
          {error && <div class="error">{error}</div>}
          <pre class="logs" id="logs" ref={pre}>{text || '(empty so far)'}</pre>
        </>
      )}
    </div>
  );
}
