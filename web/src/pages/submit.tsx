import { useEffect, useState } from 'preact/hooks';
import { call, encPath, get, tenantPath } from '../api';
import { errorText } from '../util';
import { href } from '../app';
import { ErrorBox, PageHead } from './common';

// The API's submission body (docs/server.md, POST workloads/<name>) from a form.
export function Submit({ tenant }: { tenant: string }) {
  const [f, setF] = useState({
    name: '', command: 'echo hello from $HOSTNAME; sleep 600', share: 'whole', gpus: '1', milli: '500',
    mig: '', tasks: '1', queue: 'default', priority: '0', duration: '600',
  });
  const [profiles, setProfiles] = useState<string[]>([]);
  const [queues, setQueues] = useState<string[]>(['default']);
  const [error, setError] = useState('');
  const [busy, setBusy] = useState(false);
  useEffect(() => {
    fetch('gpu-models.json').then((r) => r.json()).then((m: { models: Record<string, { mig_profiles: Record<string, unknown> }> }) => {
      const all = new Set<string>();
      Object.values(m.models).forEach((x) => Object.keys(x.mig_profiles).forEach((p) => all.add(p)));
      setProfiles([...all].sort());
    }, () => {});
    get<{ data: { queues: { name: string }[] } }>(tenantPath(tenant, 'queues')).then((d) => {
      const qs = d.data.queues.map((q) => q.name.split('/')[1]).filter((q): q is string => Boolean(q));
      if (qs.length) setQueues([...new Set(['default', ...qs])]);
    }, () => {});
  }, [tenant]);
  const set = (k: keyof typeof f) => (e: Event) => setF({ ...f, [k]: (e.target as HTMLInputElement).value });
  const submit = async (e: Event) => {
    e.preventDefault();
    setError('');
    const gpu: Record<string, unknown> = { count: Number(f.gpus) };
    if (f.share === 'fraction') gpu.milli = Number(f.milli);
    if (f.share === 'mig') gpu.mig = f.mig;
    const body: Record<string, unknown> = {
      queue: f.queue, tasks: Number(f.tasks), priority: Number(f.priority), duration: Number(f.duration),
    };
    if (Number(f.gpus) > 0) body.gpu = gpu;
    if (f.command.trim()) body.command = ['sh', '-c', f.command];
    setBusy(true);
    try {
      await call('POST', tenantPath(tenant, `workloads/${encPath(f.name.trim())}`), body);
      location.hash = href(tenant, 'workloads', f.name.trim());
    } catch (err) {
      setError(errorText(err));
    } finally {
      setBusy(false);
    }
  };
  return (
    <div>
      <PageHead title={`Submit a workload · ${tenant}`} />
      <form class="card form" id="submit-form" onSubmit={submit}>
        <div class="row">
          <label>Name<input id="f-name" value={f.name} onInput={set('name')} required pattern="[a-z0-9][a-z0-9\-]{0,62}"
                            placeholder="train-resnet" title="lowercase letters, digits and '-'" /></label>
          <label>Queue<select id="f-queue" value={f.queue} onChange={set('queue')}>{queues.map((q) => <option>{q}</option>)}</select></label>
          <label>Tasks<input id="f-tasks" type="number" min="1" value={f.tasks} onInput={set('tasks')} /></label>
          <label>Priority<input type="number" value={f.priority} onInput={set('priority')} /></label>
        </div>
        <label>Command (run with <code>sh -c</code>)<input id="f-command" class="mono" value={f.command} onInput={set('command')} /></label>
        <fieldset>
          <legend>GPUs per task</legend>
          <div class="row">
            <label class="radio"><input type="radio" name="share" value="whole" checked={f.share === 'whole'} onChange={set('share')} /> whole GPUs</label>
            <label class="radio"><input type="radio" name="share" id="f-share-fraction" value="fraction" checked={f.share === 'fraction'} onChange={set('share')} /> a fraction of a GPU</label>
            <label class="radio"><input type="radio" name="share" id="f-share-mig" value="mig" checked={f.share === 'mig'} onChange={set('share')} /> a MIG slice</label>
          </div>
          <div class="row">
            <label>Count<input id="f-gpus" type="number" min="0" value={f.gpus} onInput={set('gpus')} /></label>
            {f.share === 'fraction' && <label>Share (milli-GPU, 1-999)<input id="f-milli" type="number" min="1" max="999" value={f.milli} onInput={set('milli')} /></label>}
            {f.share === 'mig' && (
              <label>MIG profile<select id="f-mig" value={f.mig} onChange={set('mig')} required>
                <option value="">choose…</option>
                {profiles.map((p) => <option>{p}</option>)}
              </select></label>
            )}
            <label>Duration on simulated nodes (s)<input type="number" min="0" value={f.duration} onInput={set('duration')} /></label>
          </div>
        </fieldset>
        <ErrorBox error={error} />
        <button class="btn primary" type="submit" id="f-submit" disabled={busy}>{busy ? 'Submitting…' : 'Submit'}</button>
      </form>
    </div>
  );
}
