import streamlit as st

st.title("runs")
st.info("coming")
