(function(){
function pad(n){return (n<10?'0':'')+n}
function stopwatch(s){return s<60?s+'s':s<3600?Math.floor(s/60)+'m '+pad(s%60)+'s':Math.floor(s/3600)+'h '+pad(Math.floor(s%3600/60))+'m'}
function span(s){return s<60?s+' s':s<3600?Math.floor((s+30)/60)+' min':s<172800?Math.floor(s/3600)+' h '+pad(Math.floor(s%3600/60))+' min':Math.floor(s/86400)+' days'}
function tick(){
var now=Date.now();
document.querySelectorAll('[data-since]').forEach(function(e){var t=Date.parse(e.getAttribute('data-since'));if(!isNaN(t)){e.textContent=stopwatch(Math.max(0,Math.floor((now-t)/1000)))}});
document.querySelectorAll('[data-until]').forEach(function(e){var t=Date.parse(e.getAttribute('data-until'));if(!isNaN(t)){var s=Math.floor((t-now)/1000);e.textContent='('+(s<=0?'due now':'in '+span(s))+')'}});
}
var busy=false,again=false;
function refresh(){
if(busy){again=true;return}busy=true;
fetch(location.href,{credentials:'same-origin'}).then(function(r){return r.text()}).then(function(t){
var d=new DOMParser().parseFromString(t,'text/html');var m=d.querySelector('main');
if(m){document.querySelector('main').replaceWith(m);tick()}
}).catch(function(){}).then(function(){busy=false;if(again){again=false;refresh()}});
}
tick();setInterval(tick,1000);
var main=document.querySelector('main');
if(main&&main.getAttribute('data-live')){
// The first change event is the state as of connecting, which may be newer than this
// page: refreshing a page that was fetched with GET is always safe.
if(window.EventSource){var live=new EventSource('/live');live.addEventListener('change',function(){refresh()});}
setInterval(refresh,30000);
}
var tail=document.getElementById('live-tail');
if(tail&&window.EventSource){
var pre=document.getElementById('tail'),st=document.getElementById('tail-state');
var es=new EventSource(tail.getAttribute('data-events'));
es.addEventListener('event',function(m){var e;try{e=JSON.parse(m.data)}catch(x){return}
var line=document.createElement('div');line.textContent=(e.at||'').slice(11,19)+'  '+(e.kind||'')+'  '+(e.summary||'');
pre.appendChild(line);while(pre.childNodes.length>500){pre.removeChild(pre.firstChild)}pre.scrollTop=pre.scrollHeight});
es.addEventListener('end',function(){st.textContent='ended';es.close();refresh()});
es.onerror=function(){st.textContent='reconnecting'};
}
})();
