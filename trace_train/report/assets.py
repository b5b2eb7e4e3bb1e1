"""The report's inline CSS and JS (no CDN, no external fonts: the file opens from disk, offline).

The JS only builds DOM nodes with ``textContent`` (never ``innerHTML`` with data), counts uncaught
errors into ``<html data-errors>`` and sets ``<html data-ready="1">`` once the viewer has rendered.
"""

CSS = """
:root{--fg:#111827;--muted:#6b7280;--line:#e5e7eb;--bg:#f9fafb;--card:#fff;--accent:#2563eb}
*{box-sizing:border-box}
body{margin:0;font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,"Helvetica Neue",Arial,sans-serif;
 color:var(--fg);background:var(--bg)}
header{background:#111827;color:#f9fafb;padding:14px 24px}
header h1{margin:0;font-size:20px}header p{margin:4px 0 0;color:#d1d5db;font-size:13px}
header code{background:#374151;color:#f9fafb}
nav{position:sticky;top:0;z-index:5;background:#fff;border-bottom:1px solid var(--line);padding:6px 24px;
 display:flex;flex-wrap:wrap;gap:4px 14px}
nav a{color:var(--accent);text-decoration:none;font-size:13px}nav a.missing{color:var(--muted)}
main{max-width:1400px;margin:0 auto;padding:8px 24px 40px}
section{background:var(--card);border:1px solid var(--line);border-radius:8px;padding:14px 18px;margin:16px 0}
h2{margin:0 0 6px;font-size:18px}h3{margin:16px 0 6px;font-size:15px}h4{margin:0 0 4px;font-size:14px}
.subtitle{margin:0 0 10px;color:var(--muted);font-size:13px}
.note{padding:8px 12px;border-radius:6px;background:#f3f4f6;color:#374151}
.note.notrun{border-left:4px solid #9ca3af}.note.warn{background:#fffbeb;border-left:4px solid #d97706}
.note.bad{background:#fef2f2;border-left:4px solid #dc2626}
.muted{color:var(--muted)}code{font:12px ui-monospace,SFMono-Regular,Menlo,Consolas,monospace;
 background:#f3f4f6;padding:1px 4px;border-radius:4px}code.small{font-size:11px}
.tablewrap{overflow-x:auto}
table{border-collapse:collapse;margin:6px 0;font-size:13px}
th,td{border-bottom:1px solid var(--line);padding:5px 10px;text-align:left;vertical-align:middle}
th{background:#f9fafb;font-weight:600;white-space:nowrap}
td .desc{color:var(--muted);font-size:12px;max-width:340px}
.num{font-variant-numeric:tabular-nums;white-space:nowrap}
.rate{display:flex;align-items:center;gap:6px;white-space:nowrap}
svg.bar,svg.strip{vertical-align:middle}
svg .track{fill:#f3f4f6;stroke:#d1d5db}svg .gridv{stroke:#d1d5db;stroke-dasharray:2 2}
svg .pass{fill:#059669}svg .fail{fill:#e5e7eb;stroke:#d1d5db}
svg.chart{max-width:100%;height:auto;background:#fff}
svg .grid{stroke:#eef0f3}svg .frame{fill:none;stroke:#d1d5db}
svg .tick{font-size:11px;fill:#4b5563}svg .axis{font-size:12px;fill:#374151}
svg .legend{font-size:12px;fill:#111827}svg .ctitle{font-size:13px;font-weight:600;fill:#111827}
.cards{display:flex;flex-wrap:wrap;gap:12px}
.card{border:1px solid var(--line);border-radius:6px;padding:8px;background:#fff}
.headline{font-size:15px;margin:8px 0 0}
.badge{display:inline-block;padding:1px 8px;border-radius:10px;font-size:12px;font-weight:600;
 background:#e5e7eb;color:#374151}
.badge.ok{background:#d1fae5;color:#065f46}.badge.bad{background:#fee2e2;color:#991b1b}
.badge.warn{background:#fef3c7;color:#92400e}.badge.muted{background:#f3f4f6;color:#6b7280}
.heat{display:inline-block;min-width:42px;padding:1px 4px;border-radius:3px;text-align:right}
pre{white-space:pre-wrap;word-break:break-word;font:12px/1.4 ui-monospace,SFMono-Regular,Menlo,Consolas,monospace;
 background:#f8fafc;border:1px solid var(--line);border-radius:4px;padding:6px 8px;margin:4px 0;max-height:420px;
 overflow:auto}
details>summary{cursor:pointer;color:#374151}
#viewer .controls{display:flex;flex-wrap:wrap;gap:10px;align-items:center;margin-bottom:8px}
#viewer select{font:inherit;padding:3px 6px}
#viewer .panes{display:grid;grid-template-columns:300px 1fr;gap:12px;min-height:300px}
#traj-list{border:1px solid var(--line);border-radius:6px;max-height:720px;overflow:auto;margin:0;padding:0;
 list-style:none}
#traj-list li{padding:6px 8px;border-bottom:1px solid var(--line);cursor:pointer;font-size:12px}
#traj-list li:hover{background:#f3f4f6}#traj-list li.active{background:#dbeafe}
#traj-list .eid{font-family:ui-monospace,Menlo,Consolas,monospace;word-break:break-all}
#traj-detail{border:1px solid var(--line);border-radius:6px;padding:8px 12px;max-height:720px;overflow:auto}
.meta{display:flex;flex-wrap:wrap;gap:6px;align-items:center;margin-bottom:8px;font-size:12px}
.msg{border-left:4px solid #d1d5db;padding:4px 10px;margin:6px 0;background:#fff}
.msg .role{font-size:11px;font-weight:700;text-transform:uppercase;letter-spacing:.04em;color:var(--muted)}
.msg .text{white-space:pre-wrap;word-break:break-word}
.msg.user{border-color:#059669;background:#f0fdf4}.msg.assistant{border-color:#2563eb;background:#eff6ff}
.msg.tool{border-color:#9ca3af;background:#f9fafb}.msg.system{border-color:#7c3aed}
.msg.gap{border-color:transparent;color:var(--muted);font-style:italic;text-align:center}
.call .fn{font:600 12px ui-monospace,Menlo,Consolas,monospace;color:#1e3a8a}
footer{color:var(--muted);font-size:12px;text-align:center;padding:12px}
"""

# Installed before anything else, so errors anywhere in the page are counted.
ERROR_HOOK_JS = """
(function(){var root=document.documentElement;root.setAttribute('data-errors','0');
function bump(){root.setAttribute('data-errors',String(parseInt(root.getAttribute('data-errors')||'0',10)+1));}
window.addEventListener('error',bump);window.addEventListener('unhandledrejection',bump);
var orig=console.error;console.error=function(){bump();return orig.apply(console,arguments);};})();
"""

VIEWER_JS = """
(function(){
'use strict';
function el(tag,cls,text){var e=document.createElement(tag);if(cls)e.className=cls;
 if(text!==undefined&&text!==null)e.textContent=String(text);return e;}
function badge(text,kind){return el('span','badge '+(kind||''),text);}
var raw=document.getElementById('traj-data');
var data=raw?JSON.parse(raw.textContent):{sources:[],systems:[]};
var srcSel=document.getElementById('f-source'),okSel=document.getElementById('f-success'),
    capSel=document.getElementById('f-cap'),list=document.getElementById('traj-list'),
    detail=document.getElementById('traj-detail'),count=document.getElementById('f-count');
function option(sel,value,label){var o=el('option',null,label);o.value=value;sel.appendChild(o);}
function current(){return data.sources[parseInt(srcSel.value||'0',10)]||{items:[]};}
function fillCaps(){var src=current(),caps={},keep=capSel.value;capSel.textContent='';
 option(capSel,'','all capabilities');
 src.items.forEach(function(it){(it.caps||[]).forEach(function(c){caps[c]=1;});
  Object.keys(it.labels||{}).forEach(function(c){caps[c]=1;});});
 Object.keys(caps).sort().forEach(function(c){option(capSel,c,c);});
 capSel.value=caps[keep]?keep:'';}
function filtered(){var src=current(),ok=okSel.value,cap=capSel.value;
 return src.items.filter(function(it){
  if(ok==='success'&&!it.success)return false;if(ok==='failure'&&it.success)return false;
  if(cap&&(it.caps||[]).indexOf(cap)<0&&!(it.labels&&it.labels[cap]))return false;return true;});}
function renderMessage(m){
 if(m.r==='gap')return el('div','msg gap',m.c);
 var box=el('div','msg '+(['user','assistant','tool','system'].indexOf(m.r)>=0?m.r:'other'));
 if(m.r==='system'){var d=el('details');d.appendChild(el('summary',null,'system prompt'));
  d.appendChild(el('div','text',data.systems[m.s]));box.appendChild(d);return box;}
 if(m.r==='tool'){var t=el('details');var body=m.c||'';
  t.appendChild(el('summary',null,'tool response'+(m.n?' · '+m.n:'')+' ('+body.length+' chars)'));
  var shown=body;if(/^\\s*[\\[{]/.test(body)){try{shown=JSON.stringify(JSON.parse(body),null,2);}catch(e){}}
  t.appendChild(el('pre',null,shown));box.appendChild(t);return box;}
 box.appendChild(el('div','role',m.r));
 if(m.c)box.appendChild(el('div','text',m.c));
 (m.tc||[]).forEach(function(c){var call=el('div','call');call.appendChild(el('span','fn','\\u2192 '+c.n+'('));
  call.appendChild(el('pre',null,c.a));call.appendChild(el('span','fn',')'));box.appendChild(call);});
 return box;}
function show(it,li){Array.prototype.forEach.call(list.children,function(x){x.classList.remove('active');});
 if(li)li.classList.add('active');detail.textContent='';
 var meta=el('div','meta');meta.appendChild(badge(it.success?'success':'failure',it.success?'ok':'bad'));
 meta.appendChild(el('span',null,'reward '+(it.reward===null?'–':Number(it.reward).toFixed(3))));
 meta.appendChild(el('span','muted','end: '+it.end+' · env '+it.env+' · seed '+it.seed+' · policy '+it.policy));
 (it.caps||[]).forEach(function(c){meta.appendChild(badge('requires: '+c,'muted'));});
 Object.keys(it.labels||{}).sort().forEach(function(c){var l=it.labels[c];
  meta.appendChild(badge(l.toLowerCase()+': '+c,l==='LACKING'?'bad':'ok'));});
 detail.appendChild(el('h4','eid',it.id));detail.appendChild(meta);
 it.msgs.forEach(function(m){detail.appendChild(renderMessage(m));});
 detail.setAttribute('data-episode',it.id);}
function renderList(){var src=current(),items=filtered();list.textContent='';
 count.textContent=items.length+' shown · '+src.items.length+' embedded of '+src.total+' in '+src.file;
 items.forEach(function(it){var li=el('li');li.appendChild(badge(it.success?'\\u2713':'\\u2717',it.success?'ok':'bad'));
  li.appendChild(document.createTextNode(' '));li.appendChild(el('span','eid',it.id));
  var rw=it.reward===null?'–':Number(it.reward).toFixed(2);
  li.appendChild(el('div','muted','reward '+rw+' · '+it.msgs.length+' messages'));
  li.addEventListener('click',function(){show(it,li);});list.appendChild(li);});
 if(items.length){show(items[0],list.firstChild);}else{detail.textContent='';
  detail.appendChild(el('p','note','No trajectory matches the filters.'));detail.removeAttribute('data-episode');}
 return items;}
if(srcSel){data.sources.forEach(function(s,i){option(srcSel,String(i),s.name+' ('+s.items.length+')');});
 srcSel.addEventListener('change',function(){fillCaps();renderList();});
 okSel.addEventListener('change',renderList);capSel.addEventListener('change',renderList);
 // Deep link: report.html?source=<name>&episode=<episode id> opens that trajectory.
 var q=new URLSearchParams(window.location.search),want=q.get('source'),ep=q.get('episode');
 data.sources.forEach(function(s,i){if(s.name===want)srcSel.value=String(i);});
 if(data.sources.length){fillCaps();var items=renderList();
  items.forEach(function(it,i){if(ep&&it.id===ep)show(it,list.children[i]);});}}
document.documentElement.setAttribute('data-ready','1');
})();
"""
