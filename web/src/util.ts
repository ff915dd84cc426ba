import { useEffect, useRef, useState } from 'preact/hooks';
import { ApiError } from './api';

// A tenant's colour on the GPU map and in charts: stable across pages and reloads.
const kPalette = ['#4f8cff', '#36b37e', '#ffab00', '#ff5d73', '#9f7aea', '#00b8d9', '#f76707',
  '#6554c0', '#2f9e44', '#d6336c', '#1098ad', '#ae8a00'];
export function tenantColour(tenant: string): string {
  let h = 2166136261;
  for (let i = 0; i < tenant.length; i++) {
    h = Math.imul(h ^ tenant.charCodeAt(i), 16777619);
  }
  return kPalette[(h >>> 0) % kPalette.length];
}

export const gpus = (milli: number) => (milli / 1000).toLocaleString(undefined, { maximumFractionDigits: 2 });

export function errorText(e: unknown): string {
  if (e instanceof ApiError) {
    return e.status === 0 ? e.message : `${e.status}: ${e.message}`;
  }
  return String(e);
}

// Seconds as "3d 4h", "2h 5m", "4m 10s", "12s".
export function duration(s: number): string {
  if (s < 0) return 'never';
  const d = Math.floor(s / 86400), h = Math.floor((s % 86400) / 3600), m = Math.floor((s % 3600) / 60);
  if (d > 0) return `${d}d ${h}h`;
  if (h > 0) return `${h}h ${m}m`;
  if (m > 0) return `${m}m ${Math.floor(s % 60)}s`;
  return `${Math.floor(s)}s`;
}

export function ago(time: string | undefined): string {
  if (!time) return '';
  const t = Date.parse(time);
  return isNaN(t) ? time : `${duration(Math.max(0, (Date.now() - t) / 1000))} ago`;
}

// Resolves once the tab is visible: a hidden tab asks the server nothing (every request is an
// audit record, issue #37).
export function whenVisible(): Promise<void> {
  if (typeof document === 'undefined' || !document.hidden) return Promise.resolve();
  return new Promise((resolve) => {
    const seen = () => {
      if (!document.hidden) {
        document.removeEventListener('visibilitychange', seen);
        resolve();
      }
    };
    document.addEventListener('visibilitychange', seen);
  });
}

// Runs `load` now and every `ms` while the component is mounted (and again when `deps`
// change); the latest answer or error. A slow answer never overlaps the next call, and a hidden
// tab waits until it is shown again.
export function usePoll<T>(load: () => Promise<T>, ms: number, deps: unknown[] = []) {
  const [data, setData] = useState<T | null>(null);
  const [error, setError] = useState<string>('');
  const [status, setStatus] = useState<number>(0);
  const loadRef = useRef(load);
  loadRef.current = load;
  useEffect(() => {
    let stopped = false;
    let timer = 0;
    setData(null);
    setError('');
    const tick = async () => {
      await whenVisible();
      if (stopped) return;
      try {
        const d = await loadRef.current();
        if (!stopped) {
          setData(d);
          setError('');
          setStatus(200);
        }
      } catch (e) {
        if (!stopped) {
          setError(errorText(e));
          setStatus(e instanceof ApiError ? e.status : 0);
        }
      }
      if (!stopped && ms > 0) {
        timer = window.setTimeout(tick, ms);
      }
    };
    void tick();
    return () => {
      stopped = true;
      window.clearTimeout(timer);
    };
  }, deps);
  return { data, error, status };
}

// Re-renders every `ms` (countdowns).
export function useTick(ms: number) {
  const [, set] = useState(0);
  useEffect(() => {
    const t = window.setInterval(() => set((n) => n + 1), ms);
    return () => window.clearInterval(t);
  }, [ms]);
}

// Long-polls `load(index)`: the server answers at once when what it shows has changed since
// `index` (or the first time, index -1), else when it changes or after its wait (4 min here,
// with a short "unchanged" answer). An idle tab asks 15 times an hour instead of every few
// seconds; a hidden one not at all.
// `value` undefined: unchanged since `index` (the server's short answer), keep what is shown.
export function useWatch<T>(load: (index: number) => Promise<{ value?: T; index: number }>, deps: unknown[] = []) {
  const [data, setData] = useState<T | null>(null);
  const [error, setError] = useState<string>('');
  const [status, setStatus] = useState<number>(0);
  const loadRef = useRef(load);
  loadRef.current = load;
  useEffect(() => {
    let stopped = false;
    let timer = 0;
    let index = -1;
    setData(null);
    setError('');
    const pause = (ms: number) => new Promise<void>((r) => { timer = window.setTimeout(r, ms); });
    const run = async () => {
      while (!stopped) {
        await whenVisible();
        if (stopped) return;
        const started = Date.now();
        try {
          const d = await loadRef.current(index);
          if (stopped) return;
          index = d.index;
          if (d.value !== undefined) setData(d.value);
          setError('');
          setStatus(200);
          // At most one request a second, whatever the server does.
          await pause(Math.max(0, 1000 - (Date.now() - started)));
        } catch (e) {
          if (stopped) return;
          setError(errorText(e));
          setStatus(e instanceof ApiError ? e.status : 0);
          index = -1;
          await pause(5000);
        }
      }
    };
    void run();
    return () => {
      stopped = true;
      window.clearTimeout(timer);
    };
  }, deps);
  return { data, error, status };
}
