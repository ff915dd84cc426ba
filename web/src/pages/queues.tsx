import { useEffect, useState } from 'preact/hooks';
import { get, tenantPath } from '../api';
import { errorText, gpus, whenVisible } from '../util';
import { TimeChart } from '../chart';
import { ErrorBox, PageHead } from './common';

export interface QueueRow {
  name: string;
  allocated_milli_gpu: number;
  fair_share_milli_gpu: number;
  quota_milli_gpu: number;
  pending_milli_gpu: number;
}

interface History { t: number[]; rows: Map<string, { a: number[]; f: number[]; q: number[]; p: number[] }> }

// Samples kept per scope while the tab lives: leaving the page and coming back keeps the curve.
const histories = new Map<string, History>();
const kMaxSamples = 600;

export function sampleInto(scope: string, rows: QueueRow[]): History {
  let h = histories.get(scope);
  if (!h) {
    h = { t: [], rows: new Map() };
    histories.set(scope, h);
  }
  const n = h.t.length;
  h.t = [...h.t, Date.now() / 1000].slice(-kMaxSamples);
  for (const r of rows) {
    let s = h.rows.get(r.name);
    if (!s) {
      const blank = () => new Array<number>(n).fill(NaN);
      s = { a: blank(), f: blank(), q: blank(), p: blank() };
      h.rows.set(r.name, s);
    }
    s.a = [...s.a, r.allocated_milli_gpu / 1000].slice(-kMaxSamples);
    s.f = [...s.f, r.fair_share_milli_gpu / 1000].slice(-kMaxSamples);
    s.q = [...s.q, r.quota_milli_gpu / 1000].slice(-kMaxSamples);
    s.p = [...s.p, r.pending_milli_gpu / 1000].slice(-kMaxSamples);
  }
  for (const [name, s] of h.rows) {
    if (!rows.some((r) => r.name === name)) {
      for (const k of ['a', 'f', 'q', 'p'] as const) s[k] = [...s[k], NaN].slice(-kMaxSamples);
    }
  }
  return { t: h.t, rows: new Map(h.rows) };
}

// Polls the queues API every `ms` and keeps the samples.
export function useQueueSamples(path: string, scope: string, ms = 3000) {
  const [rows, setRows] = useState<QueueRow[] | null>(null);
  const [hist, setHist] = useState<History | null>(histories.get(scope) ?? null);
  const [error, setError] = useState('');
  const [status, setStatus] = useState(0);
  useEffect(() => {
    let stopped = false;
    let timer = 0;
    const tick = async () => {
      await whenVisible();
      if (stopped) return;
      try {
        const d = await get<{ data: { queues: QueueRow[] } }>(path);
        if (stopped) return;
        setRows(d.data.queues);
        setHist(sampleInto(scope, d.data.queues));
        setError('');
      } catch (e) {
        if (!stopped) {
          setError(errorText(e));
          setStatus((e as { status?: number }).status ?? 0);
        }
      }
      if (!stopped) timer = window.setTimeout(tick, ms);
    };
    void tick();
    return () => { stopped = true; window.clearTimeout(timer); };
  }, [path, scope]);
  return { rows, hist, error, status };
}

export function QueueChart({ name, hist }: { name: string; hist: History }) {
  const s = hist.rows.get(name);
  if (!s) return null;
  return (
    <TimeChart
      title={name}
      yLabel="GPUs"
      x={hist.t}
      ys={[s.a, s.f, s.q, s.p]}
      series={[
        { label: 'allocated', colour: '#4f8cff', fill: 'rgba(79,140,255,0.12)' },
        { label: 'fair share', colour: '#36b37e', dash: [6, 4] },
        { label: 'quota', colour: '#8a94a6', dash: [2, 4] },
        { label: 'pending', colour: '#ffab00' },
      ]}
    />
  );
}

export function QueueTable({ rows }: { rows: QueueRow[] }) {
  const max = Math.max(1, ...rows.map((r) => Math.max(r.allocated_milli_gpu, r.fair_share_milli_gpu, r.quota_milli_gpu)));
  return (
    <table class="table" id="queues-table">
      <thead><tr><th>Queue</th><th>Allocated</th><th>Fair share</th><th>Quota</th><th>Pending</th><th class="wide">Allocation vs fair share vs quota</th></tr></thead>
      <tbody>
        {rows.map((r) => {
          const depth = r.name.split('/').length - 1;
          return (
            <tr data-queue={r.name}>
              <td class={`mono depth${Math.min(depth, 3)}`}>{r.name}</td>
              <td>{gpus(r.allocated_milli_gpu)}</td>
              <td>{gpus(r.fair_share_milli_gpu)}</td>
              <td>{r.quota_milli_gpu ? gpus(r.quota_milli_gpu) : '—'}</td>
              <td>{gpus(r.pending_milli_gpu)}</td>
              <td><ShareBar r={r} max={max} /></td>
            </tr>
          );
        })}
      </tbody>
    </table>
  );
}

function ShareBar({ r, max }: { r: QueueRow; max: number }) {
  const pct = (v: number) => `${(100 * v) / max}%`;
  return (
    <div class="sharebar" title={`allocated ${gpus(r.allocated_milli_gpu)}, fair share ${gpus(r.fair_share_milli_gpu)}, quota ${gpus(r.quota_milli_gpu)}`}>
      <div class={r.allocated_milli_gpu > r.fair_share_milli_gpu ? 'alloc over' : 'alloc'} style={{ width: pct(r.allocated_milli_gpu) }} />
      <div class="fair" style={{ left: pct(r.fair_share_milli_gpu) }} />
      {r.quota_milli_gpu > 0 && <div class="quota" style={{ left: pct(r.quota_milli_gpu) }} />}
    </div>
  );
}

export function Queues({ tenant }: { tenant: string }) {
  const { rows, hist, error, status } = useQueueSamples(tenantPath(tenant, 'queues'), `tenant:${tenant}`);
  return (
    <div>
      <PageHead title={`Queues · ${tenant}`}>
        <span class="muted">sampled every 3 s while this page is open</span>
      </PageHead>
      <ErrorBox error={error} status={status} />
      {rows && <div class="card"><QueueTable rows={rows} /></div>}
      {rows && hist && (
        <div class="charts">
          {rows.map((r) => <div class="card"><QueueChart name={r.name} hist={hist} /></div>)}
        </div>
      )}
    </div>
  );
}
