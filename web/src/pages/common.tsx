import { ComponentChildren } from 'preact';

export function ErrorBox({ error, status }: { error: string; status?: number }) {
  if (!error) return null;
  const hint = status === 404 ? 'Not found, or outside what this token may see (another tenant\'s objects are never shown).'
    : status === 403 ? 'Permission denied: this token\'s policies do not allow it.' : '';
  return (
    <div class="error" role="alert" data-status={status ?? 0}>
      <b>{error}</b>{hint && <div class="fine">{hint}</div>}
    </div>
  );
}

export function PageHead({ title, children }: { title: string; children?: ComponentChildren }) {
  return (
    <div class="pagehead">
      <h1>{title}</h1>
      <div class="actions">{children}</div>
    </div>
  );
}

export function Phase({ phase }: { phase: string }) {
  return <span class={`phase phase-${phase}`}>{phase}</span>;
}

export const Loading = () => <div class="muted loading">Loading…</div>;
