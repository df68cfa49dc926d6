"""``report.html``: one self-contained page per fill run (works offline: no CDN, no external file).

What it shows: the diagnosis picture (every item's d on the axis, the gaps shaded) before and after the chosen items
were added; for each gap its search as a tree (rounds, parents, children with their full text, the judge's verdict
and reason, panel counts per model, the placement with its 90 % interval against the target and the tolerance, cost),
the chosen child highlighted; the review queue with full question, reference answer and panel counts. Served by
``benchfill view`` it also takes approve / reject votes, which go to the memory bank.

Every text written by a model or a user is inserted with ``textContent`` (never as HTML). LaTeX (``$...$``,
``$$...$$``, ``\\(...\\)``, ``\\[...\\]``) is typeset by the bundled KaTeX (``viewer/katex``, inlined with its fonts:
still no network), with ``trust`` off so a formula cannot make links or HTML; a click on a formula shows its source
(and back), and a formula KaTeX cannot parse stays as its source.
"""

from __future__ import annotations

import functools
import json
import re
from pathlib import Path
from typing import Any

from benchfill.memory.bank import REVIEW_RULE, MemoryBank
from benchfill.memory.trace import gap_trace, review_item, review_queue

REPORT = "report.html"
KATEX = Path(__file__).with_name("katex")


@functools.cache  # `benchfill view` builds the page per request: read and encode the fonts once
def _katex() -> tuple[str, str]:
    """(CSS, JS) of the bundled KaTeX for inlining: the CSS's woff2 fonts as data URIs, its woff/ttf fallbacks
    dropped (every browser that runs the page reads woff2)."""
    import base64

    def font(m: re.Match[str]) -> str:
        data = base64.b64encode((KATEX / "fonts" / m.group(1)).read_bytes()).decode()
        return f'url(data:font/woff2;base64,{data}) format("woff2")'

    css = (KATEX / "katex.min.css").read_text(encoding="utf-8")
    css = re.sub(r',url\(fonts/[^)]+\.(?:woff|ttf)\) format\("(?:woff|truetype)"\)', "", css)
    css = re.sub(r'url\(fonts/([^)]+\.woff2)\) format\("woff2"\)', font, css)
    return css, (KATEX / "katex.min.js").read_text(encoding="utf-8")


def _json_for_script(obj: Any) -> str:
    """JSON safe inside <script>: '<', '>' and '&' as \\u escapes (still valid JSON)."""
    text = json.dumps(obj, ensure_ascii=False, default=str)
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


def item_positions(d: list[float], digits: int = 9) -> list[tuple[float, int]]:
    """(d, number of items at it) per distinct position on the axis, ascending. Items with the same counts get the
    same d (exact per-key means), so one position can hold many items; positions equal to ``digits`` decimals
    are one."""
    counts: dict[float, int] = {}
    for x in d:
        key = round(float(x), digits)
        counts[key] = counts.get(key, 0) + 1
    return sorted(counts.items())


def report_data(run_dir: str | Path, bank: MemoryBank | None = None) -> dict[str, Any]:
    """Everything the page shows, as plain data (also what the page's script reads)."""
    run_dir = Path(run_dir)
    own = bank is None
    bank = bank or MemoryBank(run_dir / "memory.sqlite")
    try:
        diag: dict[str, Any] | None = None
        path = run_dir / "diagnosis.json"
        if path.exists():
            raw = json.loads(path.read_text())
            diag = {"source": raw.get("source"), "n_items": raw.get("n_items"), "n_models": raw.get("n_models"),
                    "ddm": raw.get("ddm"), "max_gap": raw.get("max_gap"), "top5_sum": raw.get("top5_sum"),
                    "d": [it["d"] for it in raw.get("items", [])],
                    "positions": item_positions([it["d"] for it in raw.get("items", [])]),
                    "gaps": [{k: g.get(k) for k in ("lo", "hi", "mid", "width")} for g in raw.get("gaps", [])[:10]]}
        summary = None
        if (run_dir / "summary.json").exists():
            summary = json.loads((run_dir / "summary.json").read_text())
        methods: dict[str, list[dict[str, Any]]] = {}
        for method in ("benchfill", "baseline"):
            traces = [gap_trace(bank, method, g.gap).model_dump() for g in bank.gaps(method)]
            if traces:
                methods[method] = traces
        queue = [review_item(bank, q.candidate).model_dump() for q in review_queue(bank)]
        return {"run": str(run_dir), "simulated": bool(bank.meta("simulated")),
                "tolerance": (bank.meta("params") or {}).get("tolerance"), "rule": REVIEW_RULE,
                "diagnosis": diag, "summary": summary, "methods": methods, "queue": queue}
    finally:
        if own:
            bank.close()


def build_report(run_dir: str | Path, *, served: bool = False, token: str = "", bank: MemoryBank | None = None) -> str:
    """The page as one HTML string (data, style and script inline)."""
    data = report_data(run_dir, bank)
    data["served"] = served
    data["token"] = token
    title = f"benchfill run {Path(run_dir).name}"
    from html import escape

    katex_css, katex_js = _katex()
    return (_PAGE.replace("__TITLE__", escape(title))
            .replace("__STYLE__", _STYLE + katex_css)
            .replace("__DATA__", _json_for_script(data))
            .replace("__KATEX__", katex_js.replace("</script", "<\\/script"))
            .replace("__SCRIPT__", _SCRIPT))


def write_report(run_dir: str | Path, bank: MemoryBank | None = None) -> Path:
    """Write ``report.html`` into the run folder (static: review votes need ``benchfill view``)."""
    from benchfill.io import atomic_write_text

    out = Path(run_dir) / REPORT
    atomic_write_text(out, build_report(run_dir, bank=bank))
    return out


_PAGE = """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">
<title>__TITLE__</title><style>__STYLE__</style></head>
<body>
<header><h1 id="title"></h1><p id="sub"></p></header>
<nav id="nav"></nav>
<section id="diagnosis"><h2>Diagnosis: the axis before and after</h2>
<p class="muted">Each tick is a position d of the benchmark's items (0 = easiest, 1 = hardest); items answered alike share
one d, so a tick's height grows with the number of items there, printed above it where there is room (hover a tick for
its count). <span style="background:#ffd8d8">Pink</span>: the gaps searched; <span style="color:#1a7f37">green</span>
diamonds: the items added.</p><div id="axis"></div><div id="gaptable"></div></section>
<section id="searches"><h2>Searches, gap by gap</h2>
<p class="muted">Each child: its full question and reference answer, the judge's verdict and reason, panel counts per model, and its
placement bar: <span style="background:#ffe9e9">pink</span> the gap (its ends printed above it), <span style="background:#b6e3c2">green</span> the target ±
tolerance, <span style="color:#0550ae">blue</span> d with its 90 % interval (d ± 1.645 SD), on a scale of d below it. The chosen child is framed in green.</p>
<div id="gaps"></div></section>
<section id="review"><h2>Review queue</h2><p id="rule"></p><div id="queue"></div></section>
<footer>Self-contained report written by benchfill (no network). Math is typeset by the bundled KaTeX; click a formula
for its LaTeX source.</footer>
<script type="application/json" id="data">__DATA__</script>
<script>__KATEX__</script>
<script>__SCRIPT__</script>
</body></html>
"""

_STYLE = """
body{font:14px/1.45 system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:0 auto;max-width:1200px;padding:0 16px;color:#1d1d1f}
h1{font-size:22px;margin:16px 0 4px}h2{font-size:18px;border-bottom:1px solid #ddd;padding-bottom:4px;margin-top:28px}
h3{font-size:16px;margin:18px 0 6px}.sim{background:#fff3c4;color:#7a5b00;padding:1px 6px;border-radius:4px;font-weight:600}
nav a{margin-right:12px}table{border-collapse:collapse;margin:6px 0}td,th{border:1px solid #ddd;padding:2px 8px;text-align:right}
th{background:#f5f5f7}td.l,th.l{text-align:left}.card{border:1px solid #d8d8de;border-radius:6px;padding:8px 10px;margin:6px 0 6px 18px;background:#fff}
.chosen{border:2px solid #1a7f37;background:#eefbf1}.badge{display:inline-block;padding:0 6px;border-radius:4px;font-size:12px;font-weight:600;margin-left:6px}
.b-chosen{background:#1a7f37;color:#fff}.b-invalid{background:#cf222e;color:#fff}.b-placed{background:#ddd}.b-pending{background:#ddd}
.b-accepted{background:#1a7f37;color:#fff}.b-blocked{background:#bf8700;color:#fff}.b-rejected{background:#cf222e;color:#fff}
pre.text{white-space:pre-wrap;word-break:break-word;background:#f6f8fa;padding:6px 8px;border-radius:4px;margin:4px 0;font:13px/1.4 ui-monospace,Menlo,Consolas,monospace}
.muted{color:#666}.tex{background:#eef3ff;color:#0b3d91;border-radius:3px}details>summary{cursor:pointer;font-weight:600;margin:4px 0}.parent{margin-left:12px}
.counts td{font-size:12px}svg text{font:11px system-ui,sans-serif}svg text.tick,svg text.gap-end{font-size:10px}svg text.count{font-size:10px;fill:#333}.votes{margin-top:6px}
.voteform input{margin-right:6px}.voteform button{margin-right:6px}
footer{margin:30px 0;color:#888;font-size:12px}
"""

_SCRIPT = r"""
const D = JSON.parse(document.getElementById('data').textContent);
const NS = 'http://www.w3.org/2000/svg';
function el(tag, attrs, ...kids){const e=document.createElement(tag);for(const [k,v] of Object.entries(attrs||{})){if(k==='class')e.className=v;else e.setAttribute(k,v);}for(const k of kids){if(k==null)continue;e.append(k instanceof Node?k:document.createTextNode(String(k)));}return e;}
function sv(tag, attrs, text){const e=document.createElementNS(NS,tag);for(const [k,v] of Object.entries(attrs||{}))e.setAttribute(k,v);if(text!=null)e.textContent=String(text);return e;}
function f(x,n=3){return (x==null||isNaN(x))?'-':Number(x).toFixed(n);}
const Z90=1.6448536269514722;
// LaTeX is not rendered (no math renderer is bundled): its source is shown as text, math segments marked
const TEX=/(\$\$[\s\S]+?\$\$|\$[^$\n]+?\$|\\\[[\s\S]+?\\\]|\\\([\s\S]+?\\\))/g;
function mathOf(src){const display=src.startsWith('$$')||src.startsWith('\\[');
  const body=src.startsWith('$$')?src.slice(2,-2):src.startsWith('$')?src.slice(1,-1):src.slice(2,-2);return [body,display];}
function typeset(sp){const [body,display]=mathOf(sp.dataset.src);
  try{katex.render(body,sp,{displayMode:display,throwOnError:true,trust:false});sp.classList.add('math');return true;}
  catch(e){sp.textContent=sp.dataset.src;sp.title='LaTeX source (KaTeX could not typeset it)';return false;}}
function tex(s){const fr=document.createDocumentFragment();let last=0;s=String(s||'');
  for(const m of s.matchAll(TEX)){if(m.index>last)fr.append(document.createTextNode(s.slice(last,m.index)));
    const sp=document.createElement('span');sp.className='tex';sp.dataset.src=m[0];sp.textContent=m[0];
    if(typeof katex!=='undefined'&&typeset(sp)){sp.title='click: LaTeX source';
      sp.addEventListener('click',()=>{if(sp.classList.toggle('math'))typeset(sp);else{sp.textContent=sp.dataset.src;sp.title='click: typeset';}});}
    fr.append(sp);last=m.index+m[0].length;}
  if(last<s.length)fr.append(document.createTextNode(s.slice(last)));return fr;}

document.getElementById('title').textContent = 'benchfill run ' + D.run;
const sub = document.getElementById('sub');
if (D.simulated) sub.append(el('span',{class:'sim'},'SIMULATED: every model in this run is the offline simulated world'), ' ');
if (D.diagnosis) sub.append(`${D.diagnosis.n_models} models x ${D.diagnosis.n_items} items from ${D.diagnosis.source}; plug-in DDM ${f(D.diagnosis.ddm)}, max gap ${f(D.diagnosis.max_gap)}, Top-5 ${f(D.diagnosis.top5_sum)}`);
if (D.summary) sub.append(el('br'), `Top-3 gap sum before ${f(D.summary.top3_before)}; reduction: ` + Object.entries(D.summary.methods||{}).map(([m,v])=>`${m} ${f(100*v.top3_reduction,1)} %`).join(', ') + (D.summary.oracle?`, oracle ${f(100*D.summary.oracle.top3_reduction,1)} %`:''));
const nav=document.getElementById('nav');
for (const [m, traces] of Object.entries(D.methods)) for (const t of traces) nav.append(el('a',{href:`#gap-${m}-${t.gap}`},`${m} gap ${t.gap}`));
nav.append(el('a',{href:'#review'},'review queue'));

// ---- the axis: before / after ----------------------------------------------------------------------------
function textWidth(t){return 6.5*String(t).length;}  // ~11px system-ui digits: enough to keep labels apart
// positions [[d, count], ...] -> the same with the added items' d counted in, ascending
function withAdded(pos, added){const m=new Map(pos.map(([d,n])=>[d,n]));
  for(const a of added||[]){const k=Math.round(a.d*1e9)/1e9;m.set(k,(m.get(k)||0)+1);}
  return [...m.entries()].sort((a,b)=>a[0]-b[0]);}
function axis(label, pos, gaps, added){
  const W=1100,H=104,L=70,R=20,Y0=80,X=x=>L+(W-L-R)*Math.max(0,Math.min(1,x));
  const s=sv('svg',{width:W,height:H,viewBox:`0 0 ${W} ${H}`,class:'axis','data-label':label});
  s.append(sv('text',{x:4,y:60},label));
  gaps.forEach((g,k)=>{s.append(sv('rect',{x:X(g.lo),y:24,width:Math.max(1,X(g.hi)-X(g.lo)),height:Y0-24,fill:'#ffd8d8',class:'gap'}));
    s.append(sv('text',{x:(X(g.lo)+X(g.hi))/2,y:k%2?21:10,'text-anchor':'middle'},`gap ${k+1}`));});
  s.append(sv('line',{x1:X(0),x2:X(1),y1:Y0,y2:Y0,stroke:'#333'}));
  for(let k=0;k<=10;k++){const t=k/10;s.append(sv('line',{x1:X(t),x2:X(t),y1:Y0,y2:Y0+5,stroke:'#333'}));
    s.append(sv('text',{x:X(t),y:Y0+18,'text-anchor':'middle',class:'tick'},t.toFixed(1)));}
  // one tick per position, its height growing with the items there (how many: above it where there is room)
  const most=Math.max(1,...pos.map(p=>p[1]));
  let right=-Infinity;
  for(const [d,n] of pos){
    const h=8+32*(n-1)/Math.max(1,most-1), x=X(d);
    const g=sv('g',{class:'item','data-d':d,'data-count':n});
    g.append(sv('line',{x1:x,x2:x,y1:Y0-1,y2:Y0-1-h,stroke:'#444','stroke-opacity':n>1?0.8:0.5,'stroke-width':n>1?2:1}));
    if(n>1&&x-textWidth(n)/2>right+2){g.append(sv('text',{x:x,y:Y0-4-h,'text-anchor':'middle',class:'count'},n));right=x+textWidth(n)/2;}
    g.append(sv('title',{},`${n} item${n>1?'s':''} at d = ${f(d)}`));
    s.append(g);
  }
  for(const a of added||[]){const g=sv('g',{class:'added','data-candidate':a.id});g.append(sv('path',{d:`M ${X(a.d)} 4 l 6 10 l -6 10 l -6 -10 z`,fill:'#1a7f37'}));g.append(sv('title',{},`${a.id}: d = ${f(a.d)} (gap ${a.gap})`));s.append(g);}
  return s;
}
(function(){
  const box=document.getElementById('axis');
  if(!D.diagnosis){box.append(el('p',{class:'muted'},'no diagnosis.json in this run folder'));return;}
  const bf=(D.methods.benchfill||[]).filter(t=>t.chosen!=null).map(t=>({id:t.chosen,d:t.chosen_d,gap:t.gap}));
  const gaps=(D.methods.benchfill||[]).map(t=>({lo:t.lo,hi:t.hi}));
  box.append(axis('before',D.diagnosis.positions,gaps,[]));
  box.append(axis('after',withAdded(D.diagnosis.positions,bf),[],bf));
  const t=el('table',{id:'gap-summary'});
  t.append(el('tr',{},...['method','gap','interval','target','chosen','d ± SD','|d - t|','P(inside)','P(within tol)','rounds','candidates','cost $','status'].map(h=>el('th',{},h))));
  for(const [m,traces] of Object.entries(D.methods)) for(const g of traces){
    t.append(el('tr',{},el('td',{class:'l'},m),el('td',{},g.gap),el('td',{},`[${f(g.lo)}, ${f(g.hi)}]`),el('td',{},f(g.target)),
      el('td',{class:'l'},g.chosen==null?'-':el('a',{href:`#cand-${m}-${g.chosen}`},g.chosen)),el('td',{},g.chosen==null?'-':`${f(g.chosen_d)} ± ${f(g.chosen_d_sd)}`),
      el('td',{},f(g.deviation)),el('td',{},f(g.p_inside,2)),el('td',{},f(g.p_within,2)),el('td',{},g.rounds_used),el('td',{},g.rounds.reduce((a,r)=>a+r.children.length,0)),el('td',{},f(g.usage.cost,4)),el('td',{class:'l'},g.status)));
  }
  document.getElementById('gaptable').append(t);
})();

// ---- a child's placement against the target ------------------------------------------------------------
// round values (steps 1, 2, 2.5 or 5 x 10^k) evenly spaced over [lo, hi], and the decimals they need: the step is
// between (hi - lo) / n and twice that, so 3 to 7 of them for n = 6
function niceTicks(lo, hi, n=6){
  const raw=(hi-lo)/n, p=Math.pow(10,Math.floor(Math.log10(raw)));
  const step=[1,2,2.5,5,10].map(m=>m*p).find(v=>v>=raw*(1-1e-9));
  let dec=0;while(dec<8&&Math.abs(Math.round(step*10**dec)-step*10**dec)>1e-6)dec++;
  const out=[];for(let t=Math.ceil(lo/step-1e-9)*step;t<=hi+step*1e-9;t+=step)out.push(Number(t.toFixed(dec)));
  return {ticks:out,dec};
}
function placement(c, g){
  const W=460,H=62,lo=Math.min(g.lo, c.d==null?g.lo:c.d-Z90*(c.d_sd||0))-0.02, hi=Math.max(g.hi, c.d==null?g.hi:c.d+Z90*(c.d_sd||0))+0.02;
  const X=x=>10+(W-20)*(x-lo)/(hi-lo), T=14, B=40;
  const s=sv('svg',{width:W,height:H,class:'placement'});
  s.append(sv('rect',{x:X(g.lo),y:T+2,width:X(g.hi)-X(g.lo),height:B-T-4,fill:'#ffe9e9'}));
  const tol=D.tolerance||0;
  s.append(sv('rect',{x:X(g.target-tol),y:T,width:Math.max(1,X(g.target+tol)-X(g.target-tol)),height:B-T,fill:'#b6e3c2'}));
  s.append(sv('line',{x1:X(g.target),x2:X(g.target),y1:T-2,y2:B+2,stroke:'#1a7f37','stroke-width':2}));
  if(c.d!=null){const a=c.d-Z90*(c.d_sd||0),b=c.d+Z90*(c.d_sd||0);
    s.append(sv('line',{x1:X(a),x2:X(b),y1:(T+B)/2,y2:(T+B)/2,stroke:'#0550ae','stroke-width':3}));
    s.append(sv('circle',{cx:X(c.d),cy:(T+B)/2,r:4,fill:'#0550ae'}));}
  // the gap's ends above the bar, outside it (inside where the edge of the picture is too near)
  const lw=textWidth(f(g.lo)), left=X(g.lo)-3-lw>=0, right=X(g.hi)+3+textWidth(f(g.hi))<=W;
  s.append(sv('text',{x:left?X(g.lo)-3:X(g.lo)+3,y:T-3,'text-anchor':left?'end':'start',class:'gap-end',fill:'#a1262e'},f(g.lo)));
  s.append(sv('text',{x:right?X(g.hi)+3:X(g.hi)-3,y:T-3,'text-anchor':right?'start':'end',class:'gap-end',fill:'#a1262e'},f(g.hi)));
  // the scale of d: round ticks, labelled
  s.append(sv('line',{x1:X(lo),x2:X(hi),y1:B+4,y2:B+4,stroke:'#666'}));
  const nt=niceTicks(lo,hi);
  for(const t of nt.ticks){s.append(sv('line',{x1:X(t),x2:X(t),y1:B+4,y2:B+8,stroke:'#666'}));
    s.append(sv('text',{x:X(t),y:B+19,'text-anchor':'middle',class:'tick','data-tick':t},t.toFixed(nt.dec)));}
  s.append(sv('title',{},`gap [${f(g.lo)}, ${f(g.hi)}] (pink), target ${f(g.target)} ± tolerance ${f(tol)} (green), d with its 90 % interval (blue); the scale below is d`));
  return s;
}
function countsTable(counts){
  const t=el('table',{class:'counts'});t.append(el('tr',{},el('th',{class:'l'},'panel model'),el('th',{},'correct'),el('th',{},'trials'),el('th',{},'accuracy')));
  for(const [m,[k,n]] of Object.entries(counts||{}).sort()) t.append(el('tr',{},el('td',{class:'l'},m),el('td',{},k),el('td',{},n),el('td',{},n?f(k/n,2):'-')));
  return t;
}
function childCard(m, g, c){
  const chosen=c.id===g.chosen;
  const card=el('div',{class:'card child'+(chosen?' chosen':''),id:`cand-${m}-${c.id}`,'data-candidate':c.id,'data-chosen':chosen?'true':'false'});
  const head=el('div',{},el('b',{},c.id),el('span',{class:'badge b-'+(c.valid?'placed':'invalid')},c.status));
  if(chosen) head.append(el('span',{class:'badge b-chosen'},'chosen'));
  if(c.d!=null) head.append(`  d = ${f(c.d)} ± ${f(c.d_sd)}, 90 % [${f(c.d-Z90*c.d_sd)}, ${f(c.d+Z90*c.d_sd)}], |d - t| = ${f(c.deviation)}`+(c.p_inside==null?'':`, P(inside) ${f(c.p_inside,2)}, P(within tol) ${f(c.p_within,2)}`));
  card.append(head);
  card.append(el('div',{class:'muted'},'question'),el('pre',{class:'text question'},tex(c.question)));
  card.append(el('div',{class:'muted'},'reference answer'),el('pre',{class:'text answer'},tex(c.answer)));
  const v=c.verdict||{};
  card.append(el('div',{class:'verdict'},el('b',{},'judge '),`${c.judge||'-'}: ${c.valid?'valid':'invalid'}${v.reason?' — '+v.reason:''}`));
  if(c.error) card.append(el('div',{class:'error'},el('b',{},'error: '),c.error));
  if(c.labelling) card.append(el('div',{class:'muted'},`adaptive labelling: ${c.labelling} ${c.label_note||''}`));
  if(c.d!=null) card.append(placement(c,g));
  if(c.counts) card.append(el('details',{},el('summary',{},`panel counts (${Object.values(c.counts).reduce((a,x)=>a+x[0],0)}/${Object.values(c.counts).reduce((a,x)=>a+x[1],0)})`),countsTable(c.counts)));
  card.append(el('div',{class:'muted'},`rewriter ${c.rewriter||'-'}; parent ${c.parent}`));
  return card;
}
(function(){
  const box=document.getElementById('gaps');
  for(const [m,traces] of Object.entries(D.methods)) for(const g of traces){
    const sec=el('section',{class:'gap',id:`gap-${m}-${g.gap}`,'data-method':m,'data-gap':g.gap});
    sec.append(el('h3',{},`${m} gap ${g.gap}: [${f(g.lo)}, ${f(g.hi)}], target ${f(g.target)}, ${g.status}`));
    sec.append(el('p',{},g.chosen==null?'no child chosen':`chosen ${g.chosen}: d = ${f(g.chosen_d)} ± ${f(g.chosen_d_sd)}, |d - t| = ${f(g.deviation)}, P(inside) = ${f(g.p_inside,2)}, P(|d - t| <= ${f(g.tolerance)}) = ${f(g.p_within,2)}; ${g.stop_reason?'stopped: '+g.stop_reason+'; ':''}${g.note?g.note+'; ':''}`,
      `${g.rounds_used} round(s); calls ${g.usage.calls}, tokens ${g.usage.tokens}, cost $${f(g.usage.cost,4)}`));
    for(const r of g.rounds){
      const det=el('details',{class:'round',open:''},el('summary',{},`round ${r.round} (calls ${r.usage.calls}, cost $${f(r.usage.cost,4)})`));
      for(const p of r.parents){
        const pd=el('div',{class:'parent'},el('div',{},el('b',{},'parent '),`${p.id} (${p.kind}, d = ${f(p.d)})`));
        for(const c of r.children.filter(c=>c.parent===p.id)) pd.append(childCard(m,g,c));
        det.append(pd);
      }
      sec.append(det);
    }
    box.append(m==='benchfill'?sec:el('details',{},el('summary',{},`baseline gap ${g.gap}`),sec));
  }
})();

// ---- review queue -------------------------------------------------------------------------------------------
document.getElementById('rule').textContent='Rule: '+D.rule+'.'+(D.served?' Votes are stored in the run\'s memory bank.':' This is the static report: run `benchfill view '+D.run+'` to vote from the browser, or `benchfill review '+D.run+' --approve ID --reviewer NAME`.');
function queueCard(q){
  const card=el('div',{class:'card queued','data-candidate':q.candidate,id:`review-${q.candidate}`});
  const st=el('span',{class:'badge b-'+q.status,'data-role':'status'},q.status);
  card.append(el('div',{},el('b',{},q.candidate),` gap ${q.gap}`,st,el('span',{'data-role':'tally'},` ${q.approvals} approval(s), ${q.rejections} rejection(s)`)));
  card.append(el('div',{class:'muted'},'question'),el('pre',{class:'text question'},tex(q.question)));
  card.append(el('div',{class:'muted'},'reference answer'),el('pre',{class:'text answer'},tex(q.answer)));
  const v=q.verdict||{};
  card.append(el('div',{},el('b',{},'judge '),`${q.judge||'-'}: ${q.valid?'valid':'invalid'}${v.reason?' — '+v.reason:''}`));
  const p=q.placement;
  card.append(el('div',{},el('b',{},'placement '),`d = ${f(p.d)} ± ${f(p.d_sd)}, 90 % interval [${f(p.d_lo)}, ${f(p.d_hi)}]; target ${f(p.target)} ± ${f(p.tolerance)} in gap [${f(p.lo)}, ${f(p.hi)}]; |d - t| = ${f(p.deviation)}; P(inside the gap) = ${f(p.p_inside,2)}, P(within tolerance) = ${f(p.p_within,2)}`));
  card.append(placement({d:p.d,d_sd:p.d_sd},{lo:p.lo,hi:p.hi,target:p.target}));
  card.append(countsTable(q.counts));
  const votes=el('div',{class:'votes','data-role':'votes'});
  for(const r of q.reviews||[]) votes.append(el('div',{},`${r.reviewer}: ${r.decision}${r.note?' — '+r.note:''}`));
  card.append(votes);
  if(D.served){
    const who=el('input',{placeholder:'your name',name:'reviewer','data-role':'reviewer'}), note=el('input',{placeholder:'note (optional)',name:'note','data-role':'note'});
    const msg=el('span',{class:'muted','data-role':'msg'});
    const vote=async(decision)=>{
      msg.textContent='';
      try{
        const res=await fetch('/api/review',{method:'POST',headers:{'Content-Type':'application/json','X-Benchfill-Token':D.token},
          body:JSON.stringify({candidate:q.candidate,reviewer:who.value,decision,note:note.value})});
        const out=await res.json();
        if(!res.ok){msg.textContent=out.error||('error '+res.status);return;}
        st.textContent=out.status;st.className='badge b-'+out.status;
        card.querySelector('[data-role=tally]').textContent=` ${out.approvals} approval(s), ${out.rejections} rejection(s)`;
        votes.replaceChildren(...out.reviews.map(r=>el('div',{},`${r.reviewer}: ${r.decision}${r.note?' — '+r.note:''}`)));
        msg.textContent='stored';
      }catch(e){msg.textContent='could not reach benchfill view: '+e;}
    };
    const a=el('button',{type:'button','data-role':'approve'},'approve'), r=el('button',{type:'button','data-role':'reject'},'reject');
    a.addEventListener('click',()=>vote('approve'));r.addEventListener('click',()=>vote('reject'));
    card.append(el('div',{class:'voteform'},who,note,a,r,msg));
  }
  return card;
}
(function(){
  const box=document.getElementById('queue');
  if(!D.queue.length) box.append(el('p',{class:'muted'},'nothing to review yet (no gap filled)'));
  for(const q of D.queue) box.append(queueCard(q));
  document.body.setAttribute('data-ready','true');
})();
"""
