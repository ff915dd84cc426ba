import { useEffect, useRef, useState } from 'preact/hooks';
import { call, encPath, get, tenantPath } from '../api';
import { ago, errorText, usePoll } from '../util';
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

export function WorkloadList({ tenant }: { tenant: string }) {
  const { data, error, status } = usePoll(async () => {
    // One request with `detail=true` (each workload as GET shows it); a server that answers
    // only the keys gets a GET per workload.
    const d = (await get<{ data: { keys: string[]; workloads?: Workload[] } }>(
      tenantPath(tenant, 'workloads?list=true&detail=true'))).data;
    if (d.workloads) return d.workloads;
    return Promise.all((d.keys ?? []).map((k) => get<{ data: Workload }>(tenantPath(tenant, `workloads/${encPath(k)}`)).then((w) => w.data)));
  }, 3000, [tenant]);
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
            {data.map((w) => {
              const tasks = w.status.tasks ?? [];
              const running = tasks.filter((t) => t.state === 'running').length;
              return (
                <tr data-workload={w.name}>
                  <td><a href={href(tenant, 'workloads', w.name)}>{w.name}</a></td>
                  <td><Phase phase={w.status.phase} /></td>
                  <td>{running}/{tasks.length || w.spec.tasks || 1}</td>
                  <td>{gpuSpec(w.spec.gpu)}</td>
                  <td class="mono">{[...new Set(tasks.map((t) => t.node).filter(Boolean))].join(', ')}</td>
                  <td class="reason">{w.status.reason ?? ''}</td>
                  <td class="muted">{ago(w.submitted)}</td>
                </tr>
              );
            })}
          </tbody>
        </table></div>
      )}
    </div>
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
  const { data, error, status } = usePoll(async () => {
    const [w, ev] = await Promise.all([
      get<{ data: Workload }>(base),
      get<{ data: { events: Event[] } }>(`${base}/events`),
    ]);
    return { w: w.data, events: ev.data.events ?? [] };
  }, 2000, [tenant, name]);
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
      {w && <Logs base={base} tasks={(w.status.tasks ?? []).length || 1} phase={w.status.phase} />}
    </div>
  );
}

// A task's log, followed: each poll asks for what came after the last offset.
function Logs({ base, tasks, phase }: { base: string; tasks: number; phase: string }) {
  const [task, setTask] = useState(0);
  const [stream, setStream] = useState<'stdout' | 'stderr'>('stdout');
  const [follow, setFollow] = useState(true);
  const [text, setText] = useState('');
  const [error, setError] = useState('');
  const offset = useRef(0);
  const pre = useRef<HTMLPreElement>(null);
  useEffect(() => {
    offset.current = 0;
    setText('');
    setError('');
    let stopped = false;
    let timer = 0;
    const tick = async () => {
      try {
        const d = await get<{ data: { text: string; next_offset: number } }>(
          `${base}/logs?task=${task}&stream=${stream}&offset=${offset.current}&limit=65536`);
        if (stopped) return;
        offset.current = d.data.next_offset;
        if (d.data.text) setText((t) => (t + d.data.text).slice(-200000));
        setError('');
      } catch (e) {
        if (!stopped) setError(errorText(e));
      }
      if (!stopped && follow) timer = window.setTimeout(tick, 1000);
    };
    if (phase !== 'pending') void tick();
    return () => { stopped = true; window.clearTimeout(timer); };
  }, [base, task, stream, follow, phase]);
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
      {phase === 'pending' ? <div class="muted">No log yet: the workload is pending.</div> : (
        <>
          {error && <div class="error">{error}</div>}
          <pre class="logs" id="logs" ref={pre}>{text || '(empty so far)'}</pre>
        </>
      )}
    </div>
  );
}
