import { useEffect, useRef } from 'preact/hooks';
import uPlot from 'uplot';

export interface Series {
  label: string;
  colour: string;
  dash?: number[];
  fill?: string;
  bars?: boolean;
}

// A time-series chart (uPlot): x in Unix seconds, one y array per series. Redrawn in place when
// the data change; sized to its container's width.
export function TimeChart(props: { series: Series[]; x: number[]; ys: (number | null)[][];
                                   height?: number; yLabel?: string; title?: string }) {
  const box = useRef<HTMLDivElement>(null);
  const plot = useRef<uPlot | null>(null);
  const shape = props.series.map((s) => s.label).join('|');
  useEffect(() => {
    const el = box.current;
    if (!el) return;
    const opts: uPlot.Options = {
      title: props.title,
      width: Math.max(300, el.clientWidth),
      height: props.height ?? 180,
      scales: { x: { time: true }, y: { range: (_u, _min, max) => [0, Math.max(1, max * 1.1)] } },
      axes: [{}, { label: props.yLabel, size: 50 }],
      series: [
        {},
        ...props.series.map((s) => ({
          label: s.label,
          stroke: s.colour,
          width: 2,
          dash: s.dash,
          fill: s.fill,
          paths: s.bars ? uPlot.paths.bars!({ size: [0.8, 40] }) : undefined,
          points: { show: false },
        })),
      ],
    };
    plot.current = new uPlot(opts, [props.x, ...props.ys] as uPlot.AlignedData, el);
    const resize = () => plot.current?.setSize({ width: Math.max(300, el.clientWidth), height: props.height ?? 180 });
    window.addEventListener('resize', resize);
    return () => {
      window.removeEventListener('resize', resize);
      plot.current?.destroy();
      plot.current = null;
    };
  }, [shape]);
  useEffect(() => {
    plot.current?.setData([props.x, ...props.ys] as uPlot.AlignedData);
  }, [props.x, props.ys]);
  return <div class="chart" ref={box} />;
}
